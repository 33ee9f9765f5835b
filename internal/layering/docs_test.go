package layering

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// testFileLink is a link to a test file, [`path`](target).
	testFileLink = regexp.MustCompile("\\[`([^`]+_test\\.go)`\\]\\(([^)]+)\\)")
	// testName is a test function's name in backquotes.
	testName = regexp.MustCompile("`((?:Test|Fuzz|Benchmark)\\w+)`")
)

// linkedTests returns, for each test file docs/architecture.md links, the
// test names that follow the link up to the next link or table cell.
func linkedTests(t *testing.T, doc string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for line := range strings.Lines(doc) {
		links := testFileLink.FindAllStringSubmatchIndex(line, -1)
		for i, l := range links {
			file, target := line[l[2]:l[3]], line[l[4]:l[5]]
			if target != "../"+file {
				t.Errorf("docs/architecture.md links %s to %s, want ../%s", file, target, file)
			}
			end := len(line)
			if i+1 < len(links) {
				end = links[i+1][0]
			}
			if cell := strings.IndexByte(line[l[1]:end], '|'); cell >= 0 {
				end = l[1] + cell
			}
			names := testName.FindAllStringSubmatch(line[l[1]:end], -1)
			if len(names) == 0 {
				t.Errorf("docs/architecture.md links %s without naming a test", file)
			}
			for _, n := range names {
				out[file] = append(out[file], n[1])
			}
		}
	}
	return out
}

// Every test docs/architecture.md names exists in the file it links.
func TestArchitectureLinksExistingTests(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := linkedTests(t, string(doc))
	if len(linked) < 5 {
		t.Fatalf("docs/architecture.md links %d test files, want the failure contract's", len(linked))
	}
	for file, names := range linked {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Errorf("docs/architecture.md links %s: %v", file, err)
			continue
		}
		for _, name := range names {
			if !regexp.MustCompile(`(?m)^func ` + name + `\(`).Match(src) {
				t.Errorf("docs/architecture.md names %s in %s, which has no such test", name, file)
			}
		}
	}
	for row := range strings.Lines(failureTable(t, string(doc))) {
		if strings.HasPrefix(row, "| ") && !strings.HasPrefix(row, "| event") && !testFileLink.MatchString(row) {
			t.Errorf("failure contract row links no test: %s", row)
		}
	}
}

// failureTable returns the failure contract section.
func failureTable(t *testing.T, doc string) string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n## Failure contract\n")
	if !ok {
		t.Fatal("docs/architecture.md has no Failure contract section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// The parsing: names after a link belong to it, up to the next link.
func TestLinkedTests(t *testing.T) {
	got := linkedTests(t, "| x | [`a/a_test.go`](../a/a_test.go) `TestA`, `TestB`; [`b/b_test.go`](../b/b_test.go) `TestC` (`testdata`) |\n")
	if strings.Join(got["a/a_test.go"], ",") != "TestA,TestB" || strings.Join(got["b/b_test.go"], ",") != "TestC" {
		t.Errorf("linkedTests() = %v", got)
	}
}
