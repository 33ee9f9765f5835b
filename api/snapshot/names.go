package snapshot

import "strings"

// The checks below accept what k8s.io/apimachinery's validation accepts
// for the fields of an object's ID, without its regular expressions:
// ValidateObject runs once for every resource an agent sends, and the
// expressions were most of its cost. Each accepts a subset of what the
// validation function it names accepts (exactly it for ASCII), so
// ValidateObject asks apimachinery only for the message of a field they
// refuse (TestNameChecksAgreeWithApimachinery, FuzzNameChecks).

// isDNS1123Subdomain reports whether validation.IsDNS1123Subdomain(s)
// returns no error.
func isDNS1123Subdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for {
		label, rest, more := strings.Cut(s, ".")
		if !isLabel(label, false, false) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

// isDNS1123Label reports whether validation.IsDNS1123Label(s) returns no
// error.
func isDNS1123Label(s string) bool { return len(s) <= 63 && isLabel(s, false, false) }

// isDNS1035Label reports whether validation.IsDNS1035Label(s) returns no
// error; with fold, whether it does for s lowercased, when s is ASCII.
func isDNS1035Label(s string, fold bool) bool {
	return len(s) <= 63 && isLabel(s, true, fold)
}

// isLabel reports whether s is a DNS label: lowercase letters, digits and
// '-', starting with a letter (or, unless letterFirst, a digit) and ending
// with a letter or digit. With fold, uppercase ASCII letters count as
// letters.
func isLabel(s string, letterFirst, fold bool) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if fold && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		switch {
		case 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9':
			if i == 0 && letterFirst {
				return false
			}
		case c == '-':
			if i == 0 || i == len(s)-1 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// objectNamesValid reports whether ValidateObject's checks of id's fields
// pass, given that id.Validate did.
func (id ID) objectNamesValid() bool {
	return (id.Group == "" || isDNS1123Subdomain(id.Group)) &&
		isDNS1035Label(id.Version, false) &&
		isDNS1035Label(id.Kind, true) &&
		(id.Namespace == "" || isDNS1123Label(id.Namespace)) &&
		isDNS1123Subdomain(id.Name)
}
