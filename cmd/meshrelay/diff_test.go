package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/core/preview"
)

// meshrelay diff against the demo fleet (real agents, real plugin
// processes), live and offline: one case per kind of change, each with
// the same answer both ways, and the exit codes (0 nothing changes, 1
// something would, 2 an error).
func TestDiff(t *testing.T) {
	admin, demoDir := serveDemoOut(t, "")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	offline := []string{"--log-level", "error", "--clusters", filepath.Join(root, "testdata", "demo", "clusters"),
		"--policies", filepath.Join(demoDir, "policies"), "--plugin-dir", filepath.Join(demoDir, "plugins")}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	current, err := os.ReadFile(filepath.Join(demoDir, "policies", "reviews-traffic.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(current), "timeout: 3s", "timeout: 7s", 1)
	if changed == string(current) {
		t.Fatal("the demo's TrafficPolicy has no 3s timeout to change")
	}
	added := `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: details-from-productpage, namespace: bookinfo}
spec:
  destinationSelectors: [{namespaces: [bookinfo], names: [details]}]
  action: Allow
  from: [{serviceAccounts: [{namespace: bookinfo, name: bookinfo-productpage}]}]
`
	tests := map[string]struct {
		args []string
		code int
		// check looks at the report.
		check func(t *testing.T, rep *preview.Report)
	}{
		"a policy changed": {args: []string{"-f", write("changed.yaml", changed)}, code: 1, check: func(t *testing.T, rep *preview.Report) {
			if !hasChange(rep, "changed", "VirtualService", "7s") {
				t.Errorf("no VirtualService changed to the 7s timeout: %+v", rep.Outputs)
			}
			if hasChange(rep, "created", "", "") || hasChange(rep, "deleted", "", "") {
				t.Errorf("a timeout change creates or deletes resources: %+v", rep.Outputs)
			}
		}},
		"a policy added": {args: []string{"-f", write("added.yaml", added)}, code: 1, check: func(t *testing.T, rep *preview.Report) {
			if !hasChange(rep, "created", "AuthorizationPolicy", "bookinfo-productpage") {
				t.Errorf("no AuthorizationPolicy created for the new AccessPolicy: %+v", rep.Outputs)
			}
		}},
		"a policy deleted": {args: []string{"--delete", "-f", filepath.Join(demoDir, "policies", "ratings-access.yaml")}, code: 1, check: func(t *testing.T, rep *preview.Report) {
			if !hasChange(rep, "deleted", "AuthorizationPolicy", "bookinfo-reviews") {
				t.Errorf("no AuthorizationPolicy deleted with the AccessPolicy: %+v", rep.Outputs)
			}
		}},
		"the policy as it is": {args: []string{"-f", filepath.Join(demoDir, "policies", "reviews-traffic.yaml")}, code: 0, check: func(t *testing.T, rep *preview.Report) {
			if !rep.Empty() {
				t.Errorf("the unchanged policy gives a diff: %+v", rep)
			}
		}},
		"a delete of a policy the fleet lacks": {args: []string{"--delete", "-f", write("added2.yaml", added)}, code: 2},
		"not a policy":                         {args: []string{"-f", write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: y}\n")}, code: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var reports [2]*preview.Report
			for i, where := range [][]string{admin, offline} {
				out, err := run(t, append(append([]string{"diff", "-o", "json"}, tc.args...), where...)...)
				if code := codeOf(err); code != tc.code {
					t.Fatalf("meshrelay diff %v: exit %d (%v), want %d\n%s", tc.args, code, err, tc.code, out)
				}
				if tc.check == nil {
					continue
				}
				var rep preview.Report
				if err := json.Unmarshal([]byte(out), &rep); err != nil {
					t.Fatalf("decode %s: %v", out, err)
				}
				tc.check(t, &rep)
				reports[i] = &rep
			}
			if tc.check != nil {
				if diff := cmp.Diff(reports[0], reports[1]); diff != "" {
					t.Errorf("live and offline answers differ (-live +offline):\n%s", diff)
				}
			}
		})
	}

	// Text for people: the unified diff of the changed resource.
	out, err := run(t, append([]string{"diff", "-f", filepath.Join(dir, "changed.yaml")}, admin...)...)
	if codeOf(err) != 1 || !strings.Contains(out, "~ changed VirtualService.networking.istio.io bookinfo/") ||
		!regexp.MustCompile(`(?m)^\s+-\s+timeout: 3s$`).MatchString(out) || !regexp.MustCompile(`(?m)^\s+\+\s+timeout: 7s$`).MatchString(out) {
		t.Errorf("text diff (exit %d):\n%s", codeOf(err), out)
	}
}

// hasChange reports whether rep has a resource of the kind whose diff
// contains text, in the section (created, changed, deleted).
func hasChange(rep *preview.Report, section, kind, text string) bool {
	for _, o := range rep.Outputs {
		rs := map[string][]preview.ResourceDiff{"created": o.Created, "changed": o.Changed, "deleted": o.Deleted}[section]
		for _, r := range rs {
			if strings.HasPrefix(r.Resource, kind) && strings.Contains(r.Diff, text) {
				return true
			}
		}
	}
	return false
}

func codeOf(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitCode(err)
}

// TestDiffOfflineWithoutPlugins: an offline diff with a plugin directory
// holding no plugins is an error (exit 2), not "no change".
func TestDiffOfflineWithoutPlugins(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: policy.meshrelay.io/v1alpha1\nkind: AccessPolicy\nmetadata: {name: a, namespace: default}\nspec: {action: Deny}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"clusters/east", "policies", "plugins"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	east, err := os.ReadFile("../../testdata/demo/clusters/east/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "clusters/east/cluster.yaml"), east, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "diff", "--clusters", filepath.Join(dir, "clusters"), "--policies", filepath.Join(dir, "policies"),
		"--plugin-dir", filepath.Join(dir, "plugins"), "-f", policy)
	if codeOf(err) < 2 || err == nil || !strings.Contains(err.Error(), "no plugins installed") {
		t.Errorf("diff with an empty plugin directory: exit %d, %v\n%s", codeOf(err), err, out)
	}
}
