package meta

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable returns s safe to show a person on a terminal or in a text
// view: control characters (newlines, tabs, terminal escape sequences),
// invisible formatting characters (such as bidirectional overrides) and
// line separators are written as Go escapes (`\n`, `\t`, `\x1b`,
// `\u202e`), and invalid UTF-8 as U+FFFD. Every human-readable output of
// text that agents, plugins or policy authors control goes through it, so
// such text stays on its line and changes nothing but its own characters.
func Printable(s string) string {
	if isPrintableASCII(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			b.WriteRune(utf8.RuneError)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isPrintableASCII reports whether s holds only printable ASCII.
func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
