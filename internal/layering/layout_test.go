package layering

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// layoutRows returns the paths each row of CONTRIBUTING.md's layout table
// names: "`core/store` (+ `memory`, `redis`)" names core/store,
// core/store/memory and core/store/redis; a path may end in a * pattern.
func layoutRows(t *testing.T, root string) [][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "CONTRIBUTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Layout\n")
	if !ok {
		t.Fatal("CONTRIBUTING.md has no Layout section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows [][]string
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.Contains(cells[1], "`") {
			continue // not a row, or the header
		}
		rows = append(rows, rowPaths(cells[1]))
	}
	if len(rows) < 10 {
		t.Fatalf("CONTRIBUTING.md's layout table has %d rows", len(rows))
	}
	return rows
}

var quoted = regexp.MustCompile("`([^`]+)`")

// rowPaths returns the paths the first cell of a row names.
func rowPaths(cell string) []string {
	base, subs, _ := strings.Cut(cell, "(+")
	var out []string
	for _, m := range quoted.FindAllStringSubmatch(base, -1) {
		out = append(out, strings.TrimSuffix(m[1], "/"))
	}
	if len(out) == 0 {
		return nil
	}
	parent := out[len(out)-1]
	for _, m := range quoted.FindAllStringSubmatch(subs, -1) {
		out = append(out, parent+"/"+m[1])
	}
	return out
}

func TestLayoutTableMatchesTree(t *testing.T) {
	root := moduleRoot(t)
	rows := layoutRows(t, root)
	var named []string
	for _, row := range rows {
		named = append(named, row...)
	}
	graph := imports(t)
	covered := func(pkg string) bool {
		return slices.ContainsFunc(named, func(p string) bool { ok, _ := path.Match(p, pkg); return ok })
	}
	for pkg := range graph {
		if !covered(pkg) {
			t.Errorf("package %s has no row in CONTRIBUTING.md's layout table", pkg)
		}
	}
	for _, p := range named {
		if strings.Contains(p, "*") {
			matches, _ := filepath.Glob(filepath.Join(root, p))
			if len(matches) == 0 {
				t.Errorf("CONTRIBUTING.md's layout table names %s, which matches nothing", p)
			}
			continue
		}
		if _, isPkg := graph[p]; isPkg {
			continue
		}
		if info, err := os.Stat(filepath.Join(root, p)); err != nil || !info.IsDir() {
			t.Errorf("CONTRIBUTING.md's layout table names %s, which is no package or directory", p)
		}
	}
}

// The table's parsing: a row's sub-packages are relative to its first path.
func TestRowPaths(t *testing.T) {
	got := rowPaths(" `core/agent` (+ `discovery`, `sink`) ")
	want := []string{"core/agent", "core/agent/discovery", "core/agent/sink"}
	if !slices.Equal(got, want) {
		t.Errorf("rowPaths() = %q, want %q", got, want)
	}
	got = rowPaths(" `cmd/meshrelay`, `cmd/meshrelay-plugin-*` ")
	if want := []string{"cmd/meshrelay", "cmd/meshrelay-plugin-*"}; !slices.Equal(got, want) {
		t.Errorf("rowPaths() = %q, want %q", got, want)
	}
}
