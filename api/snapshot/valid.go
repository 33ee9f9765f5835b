package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
)

// maxJSONDepth is the deepest nesting of arrays and objects ValidJSON
// accepts: encoding/json's own limit.
const maxJSONDepth = 10000

// ValidJSON reports whether b is one valid JSON value, as json.Valid
// does: the same values are valid (strings are not checked for UTF-8,
// nesting stops at encoding/json's depth of 10,000), at several times its
// speed. Every resource body from the network passes through it, so it is
// on the path of every input, output and plugin answer.
func ValidJSON(b []byte) bool { return scanJSON(b, nil) == nil }

// errInvalidJSON is scanJSON's answer for a body that is not valid JSON.
var errInvalidJSON = errors.New("not valid JSON")

// validObjectMembers calls member for each member of the valid JSON object
// b, in order, as [ObjectMembers] does, in the same pass that validates b.
// ok is false when b is not a valid JSON object, or when a member's call
// failed (err is then its error). The calls made before b turned out
// invalid are not taken back.
func validObjectMembers(b []byte, member func(key, value []byte) error) (ok bool, err error) {
	if i := skipSpace(b, 0); i >= len(b) || b[i] != '{' {
		return false, nil
	}
	switch err := scanJSON(b, member); err {
	case nil:
		return true, nil
	case errInvalidJSON:
		return false, nil
	default:
		return false, err
	}
}

// scanJSON returns nil when b is one valid JSON value, else
// errInvalidJSON or what member returned. When b is an object, it calls
// member, if not nil, with each of its members as the member's value
// ends.
func scanJSON(b []byte, member func(key, value []byte) error) error {
	// stack holds the open containers, '{' or '['.
	var stack []byte
	// key and value are where the current member of a top-level object
	// starts: its key's opening quote and its value.
	var key, value int
	i := skipSpace(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return errInvalidJSON
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) == maxJSONDepth {
				return errInvalidJSON
			}
			stack = append(stack, c)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' is '{'+2, ']' is '['+2
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = memberKey(b, i, member != nil && len(stack) == 1, &key, &value); i < 0 {
					return errInvalidJSON
				}
			}
			continue
		case c == '"':
			if i = validString(b, i); i < 0 {
				return errInvalidJSON
			}
		case c == '-' || ('0' <= c && c <= '9'):
			if i = skipNumber(b, i); i < 0 {
				return errInvalidJSON
			}
		case c == 't':
			if i = skipLiteral(b, i, "true"); i < 0 {
				return errInvalidJSON
			}
		case c == 'f':
			if i = skipLiteral(b, i, "false"); i < 0 {
				return errInvalidJSON
			}
		case c == 'n':
			if i = skipLiteral(b, i, "null"); i < 0 {
				return errInvalidJSON
			}
		default:
			return errInvalidJSON
		}
		// A value ended at i: close containers, or go on to the next
		// element or member.
		for {
			if member != nil && len(stack) == 1 && stack[0] == '{' {
				if err := member(memberName(b[key:value]), b[value:i]); err != nil {
					return err
				}
			}
			i = skipSpace(b, i)
			if len(stack) == 0 {
				if i != len(b) {
					return errInvalidJSON
				}
				return nil
			}
			if i >= len(b) {
				return errInvalidJSON
			}
			top := stack[len(stack)-1]
			if b[i] == top+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return errInvalidJSON
			}
			i = skipSpace(b, i+1)
			if top == '{' {
				if i = memberKey(b, i, member != nil && len(stack) == 1, &key, &value); i < 0 {
					return errInvalidJSON
				}
			}
			break
		}
	}
}

// memberKey reads the key of an object's member at i as objectKey does,
// and with mark notes where the key and the value start in key and value.
func memberKey(b []byte, i int, mark bool, key, value *int) int {
	next := objectKey(b, i)
	if next >= 0 && mark {
		*key, *value = i, next
	}
	return next
}

// objectKey skips an object's key and its colon from i, and returns where
// the member's value starts (after spaces), or -1.
func objectKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = validString(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// plain marks the bytes a JSON string holds as they are: not a quote, a
// backslash or a control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// validString returns the index after the valid JSON string whose opening
// quote is at i, or -1.
func validString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		if plain[b[i]] {
			continue
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return -1
				}
				i += 4
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
	return -1
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipNumber returns the index after the JSON number at i, or -1.
func skipNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// skipLiteral returns the index after lit at i, or -1.
func skipLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// memberName returns the key of a member, given the bytes from the key's
// opening quote to its value (the key, spaces and the colon), unescaped as
// ObjectMembers unescapes it. The key passed validString, so its escapes
// decode; were one not to, the key would be returned as it stands.
func memberName(b []byte) []byte {
	end := bytes.LastIndexByte(b, '"')
	name := b[1:end]
	if bytes.IndexByte(name, '\\') < 0 {
		return name
	}
	var s string
	if json.Unmarshal(b[:end+1], &s) != nil {
		return name
	}
	return []byte(s)
}
