package meta

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	length := func(s string) int { return len(s) }
	tests := map[string]struct {
		items []string
		max   int
		want  [][]string
	}{
		"nothing is one empty part":            {items: nil, max: 10, want: [][]string{nil}},
		"an empty list is one empty part":      {items: []string{}, max: 10, want: [][]string{nil}},
		"everything fits in one part":          {items: []string{"aa", "bb", "cc"}, max: 6, want: [][]string{{"aa", "bb", "cc"}}},
		"a part is cut before it would exceed": {items: []string{"aa", "bb", "cc"}, max: 5, want: [][]string{{"aa", "bb"}, {"cc"}}},
		"one item per part":                    {items: []string{"aaa", "bbb", "ccc"}, max: 3, want: [][]string{{"aaa"}, {"bbb"}, {"ccc"}}},
		"a larger item gets a part of its own": {items: []string{"a", "bbbbbbb", "c"}, max: 3, want: [][]string{{"a"}, {"bbbbbbb"}, {"c"}}},
		"a larger first item":                  {items: []string{"bbbbbbb", "a", "c"}, max: 3, want: [][]string{{"bbbbbbb"}, {"a", "c"}}},
		"empty items join any part":            {items: []string{"aaa", "", "", "b"}, max: 3, want: [][]string{{"aaa", "", ""}, {"b"}}},
		"only empty items":                     {items: []string{"", ""}, max: 0, want: [][]string{{"", ""}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Split(tc.items, length, tc.max)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Split(%q, %d) = %q, want %q", tc.items, tc.max, got, tc.want)
			}
			if joined := strings.Join(concat(got), ","); joined != strings.Join(tc.items, ",") {
				t.Fatalf("parts join to %q, want the items %q", joined, tc.items)
			}
		})
	}
}

// TestSplitPartsDoNotOverlap checks that appending to a part leaves the
// next part as it was.
func TestSplitPartsDoNotOverlap(t *testing.T) {
	parts := Split([]int{1, 2, 3, 4}, func(int) int { return 1 }, 2)
	if len(parts) != 2 {
		t.Fatalf("Split = %v, want two parts", parts)
	}
	_ = append(parts[0], 99)
	if parts[1][0] != 3 {
		t.Fatalf("appending to the first part changed the second: %v", parts[1])
	}
}

func concat(parts [][]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
