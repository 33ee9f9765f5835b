package discovery

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, to, string(data))
}

var reviewsSvc = snapshot.ID{Version: "v1", Kind: "Service", Name: "reviews"}

func TestDirSnapshot(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/bookinfo/bookinfo.yaml", filepath.Join(dir, "apps", "bookinfo.yaml"))
	testutil.WriteFile(t, filepath.Join(dir, "broken.yaml"), `
apiVersion: v1
kind: Service
metadata:
  name: fine
  namespace: default
---
this: is: not yaml
---
kind: Service
metadata:
  name: no-api-version
---
- a list
---
# only a comment
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ServiceAccount
  metadata:
    name: from-list
    namespace: default
`)
	testutil.WriteFile(t, filepath.Join(dir, "notes.txt"), "not a manifest")
	testutil.WriteFile(t, filepath.Join(dir, "eastwest.json"), `{"apiVersion":"v1","kind":"Service","metadata":{"name":"eastwest","namespace":"istio-system","labels":{"istio":"eastwestgateway"}},
"spec":{"type":"LoadBalancer","ports":[{"name":"tls","port":15443}]},"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.7"}]}}}`)

	s, err := NewDir(dir, DirOptions{Logger: quietLogger()}).Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() error = %v", err)
	}
	for _, tc := range []struct {
		group, kind string
		want        int
	}{
		{"", "Service", 4 + 2},
		{"apps", "Deployment", 6},
		{"", "ServiceAccount", 4 + 1},
		{discoveryv1alpha1.Group, "Gateway", 1},
	} {
		if got := countKind(s, tc.group, tc.kind, "*"); got != tc.want {
			t.Errorf("%s/%s count = %d, want %d", tc.group, tc.kind, got, tc.want)
		}
	}
	if !has(s, reviewsSvc) {
		t.Errorf("snapshot lacks %s", reviewsSvc)
	}
	gw, ok := s.Get(snapshot.ID{Group: discoveryv1alpha1.Group, Version: discoveryv1alpha1.Version, Kind: "Gateway", Namespace: "istio-system", Name: "eastwest"})
	if !ok {
		t.Fatal("no Gateway for the east-west Service")
	}
	var g discoveryv1alpha1.Gateway
	if err := gw.Decode(&g); err != nil {
		t.Fatal(err)
	}
	if len(g.Spec.Addresses) != 1 || g.Spec.Addresses[0] != "192.0.2.7" || g.Spec.Port != 15443 {
		t.Errorf("Gateway spec = %+v, want address 192.0.2.7 port 15443", g.Spec)
	}
}

func TestDirRunPublishesOnChange(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/bookinfo/bookinfo.yaml", filepath.Join(dir, "bookinfo.yaml"))
	src := NewDir(dir, DirOptions{Interval: 10 * time.Millisecond, Logger: quietLogger()})
	c := testutil.RunSource(t, src)
	first := c.WaitFor(t, "bookinfo is read", func(s *snapshot.Snapshot) bool { return has(s, reviewsSvc) })
	if first.Version() != 1 {
		t.Errorf("first Version() = %d, want 1", first.Version())
	}

	// Status only: no new snapshot. A later meaningful change must come
	// alone in the next snapshot.
	testutil.WriteFile(t, filepath.Join(dir, "status.yaml"), `apiVersion: apps/v1
kind: Deployment
metadata: {name: churn, namespace: default, resourceVersion: "1"}
spec: {replicas: 1}
status: {replicas: 0}
`)
	second := c.WaitFor(t, "churn appears", func(s *snapshot.Snapshot) bool {
		return has(s, snapshot.ID{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "default", Name: "churn"})
	})
	n := c.Count()
	testutil.WriteFile(t, filepath.Join(dir, "status.yaml"), `apiVersion: apps/v1
kind: Deployment
metadata: {name: churn, namespace: default, resourceVersion: "2", managedFields: [{manager: kubectl}]}
spec: {replicas: 1}
status: {replicas: 1, readyReplicas: 1}
`)
	testutil.WriteFile(t, filepath.Join(dir, "z-marker.yaml"), `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"marker","namespace":"default"}}`)
	third := c.WaitFor(t, "marker appears", func(s *snapshot.Snapshot) bool {
		return has(s, snapshot.ID{Version: "v1", Kind: "ServiceAccount", Namespace: "default", Name: "marker"})
	})
	if got := c.Count(); got != n+1 {
		t.Errorf("snapshots after status churn and marker = %d, want %d", got, n+1)
	}
	d := snapshot.Diff(second, third)
	if len(d.Upserts) != 1 || d.Upserts[0].ID.Name != "marker" || len(d.Deletes) != 0 {
		t.Errorf("Diff = %d upserts (%v), %d deletes; want only the marker", len(d.Upserts), d.Upserts, len(d.Deletes))
	}

	// A broken edit keeps the rest; removing a file deletes its objects.
	testutil.WriteFile(t, filepath.Join(dir, "z-marker.yaml"), `{"apiVersion":`)
	c.WaitFor(t, "marker is gone", func(s *snapshot.Snapshot) bool {
		return !has(s, snapshot.ID{Version: "v1", Kind: "ServiceAccount", Namespace: "default", Name: "marker"}) && has(s, reviewsSvc)
	})
	if err := os.Remove(filepath.Join(dir, "bookinfo.yaml")); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(t, "bookinfo is gone", func(s *snapshot.Snapshot) bool { return !has(s, reviewsSvc) })
}

func TestDirFilter(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "a.yaml"), `apiVersion: v1
kind: Namespace
metadata: {name: kept}
---
apiVersion: v1
kind: Namespace
metadata: {name: dropped}
---
apiVersion: v1
kind: Service
metadata: {name: a, namespace: kept}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: kept, labels: {meshrelay.io/discovery: skip}}
---
apiVersion: v1
kind: Service
metadata: {name: c, namespace: dropped}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {topology.kubernetes.io/zone: z1, kubernetes.io/os: linux}}
status: {capacity: {cpu: "4"}}
`)
	s, err := NewDir(dir, DirOptions{Filter: Filter{
		ExcludeNamespaces: []string{"dropped"},
		ExcludeSelector:   "meshrelay.io/discovery=skip",
	}, Logger: quietLogger()}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for r := range s.All() {
		got = append(got, r.ID.String())
	}
	want := []string{
		"core/v1/Namespace/-/kept",
		"core/v1/Node/-/n1",
		"core/v1/Service/kept/a",
	}
	if len(got) != len(want) {
		t.Fatalf("IDs = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("IDs = %v, want %v", got, want)
			break
		}
	}
	node, _ := s.Get(snapshot.ID{Version: "v1", Kind: "Node", Name: "n1"})
	if string(node.Body) != `{"apiVersion":"v1","kind":"Node","metadata":{"labels":{"topology.kubernetes.io/zone":"z1"},"name":"n1"}}` {
		t.Errorf("Node body = %s", node.Body)
	}

	if _, err := NewDir(dir, DirOptions{Filter: Filter{ExcludeSelector: "a in ("}}).Snapshot(); err == nil {
		t.Error("Snapshot() with a bad selector succeeded, want error")
	}
}
