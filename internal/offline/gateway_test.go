package offline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An east-west gateway address that is neither an IP nor a DNS name, in
// one cluster's Service status, never reaches another cluster's outputs
// through the real Istio translator: discovery leaves it out of the
// cluster's Gateway, and the valid address still arrives.
func TestInvalidGatewayAddressNeverReachesOtherClusters(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "demo", "clusters")
	dir := t.TempDir()
	bad := []string{"evil.example.com\n  - address: 198.51.100.66", "198.51.100.0/24", "fe80::1%eth0"}
	for _, c := range []string{"east", "west", "central"} {
		data, err := os.ReadFile(filepath.Join(src, c, "cluster.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if c == "west" {
			const ingress = "    ingress:\n    - ip: 203.0.113.20\n"
			if !strings.Contains(string(data), ingress) {
				t.Fatal("west's east-west gateway Service is not as this test expects")
			}
			more := ingress
			for _, a := range bad {
				more += "    - hostname: " + quoteYAML(a) + "\n"
			}
			data = []byte(strings.Replace(string(data), ingress, more, 1))
		}
		if err := os.MkdirAll(filepath.Join(dir, c), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, c, "cluster.yaml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Translate(context.Background(), Options{
		ClustersDir: dir, PoliciesDir: filepath.Join("..", "..", "testdata", "policies"), Translators: translators(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failed) > 0 {
		t.Fatalf("translators failed: %+v", res.Failed)
	}
	reached := false
	for _, k := range res.Keys() {
		if k.Cluster == "west" {
			continue
		}
		for r := range res.Outputs[k].All() {
			body := string(r.Body)
			reached = reached || strings.Contains(body, "203.0.113.20")
			for _, s := range []string{"evil.example.com", "198.51.100"} {
				if strings.Contains(body, s) {
					t.Errorf("%s/%s output %s holds west's invalid gateway address %q", k.Cluster, k.Backend, r.ID, s)
				}
			}
		}
	}
	if !reached {
		t.Error("west's valid gateway address 203.0.113.20 reached no other cluster's output")
	}
}

// quoteYAML quotes s as a YAML double-quoted scalar.
func quoteYAML(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
