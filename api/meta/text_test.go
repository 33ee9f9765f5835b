package meta

import (
	"strings"
	"testing"
)

func TestPrintable(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"plain":             {"connection refused", "connection refused"},
		"letters":           {"réseau 東京", "réseau 東京"},
		"newline":           {"denied\n---\nkind: Fake", `denied\n---\nkind: Fake`},
		"tab and return":    {"a\tb\rc", `a\tb\rc`},
		"terminal escapes":  {"\x1b[31mred\x1b]0;title\x07", `\x1b[31mred\x1b]0;title\x07`},
		"delete and C1":     {"a\x7fb\u0085c\u009bd", `a\x7fb\u0085c\u009bd`},
		"bidi override":     {"abc\u202eexe.txt", `abc\u202eexe.txt`},
		"line separator":    {"a\u2028b\u2029c", `a\u2028b\u2029c`},
		"zero width":        {"a\u200bb", `a\u200bb`},
		"invalid UTF-8":     {"a\xffb", "a\uFFFDb"},
		"backslash is kept": {`a\nb`, `a\nb`},
	} {
		t.Run(name, func(t *testing.T) {
			got := Printable(tc.in)
			if got != tc.want {
				t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if strings.ContainsAny(got, "\n\r\t\x1b\x07") {
				t.Errorf("Printable(%q) = %q still holds control characters", tc.in, got)
			}
		})
	}
}
