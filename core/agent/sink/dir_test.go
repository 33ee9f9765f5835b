package sink

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestDirApply(t *testing.T) {
	root := t.TempDir()
	d := NewDir(root)
	ctx := context.Background()
	reviews := virtualService(t, "bookinfo", "reviews", "reviews", 80)
	ratings := virtualService(t, "bookinfo", "ratings", "ratings", 50)
	cm := configMap(t, "bookinfo", "ours", "a")

	errs, err := d.Apply(ctx, "istio", snap(t, reviews, ratings, cm), true)
	if err != nil || len(errs) != 0 {
		t.Fatalf("Apply() = %v, %v", errs, err)
	}
	want := []string{
		"configmap.core_bookinfo_ours.yaml",
		"virtualservice.networking.istio.io_bookinfo_ratings.yaml",
		"virtualservice.networking.istio.io_bookinfo_reviews.yaml",
	}
	if got := listDir(t, filepath.Join(root, "istio")); !slices.Equal(got, want) {
		t.Errorf("files = %v, want %v", got, want)
	}
	data, err := os.ReadFile(filepath.Join(root, "istio", want[2]))
	if err != nil {
		t.Fatal(err)
	}
	back, err := snapshot.FromYAML(data)
	if err != nil || back.Hash != reviews.Hash {
		t.Errorf("file does not round-trip: %v", err)
	}

	// Another backend has its own directory.
	if _, err := d.Apply(ctx, "cilium", snap(t, cm), true); err != nil {
		t.Fatal(err)
	}

	// Update in place; prune=false keeps removed resources.
	updated := virtualService(t, "bookinfo", "reviews", "reviews", 20)
	if errs, err := d.Apply(ctx, "istio", snap(t, updated), false); err != nil || len(errs) != 0 {
		t.Fatalf("Apply(prune=false) = %v, %v", errs, err)
	}
	if got := listDir(t, filepath.Join(root, "istio")); !slices.Equal(got, want) {
		t.Errorf("files after prune=false = %v, want %v", got, want)
	}
	data, _ = os.ReadFile(filepath.Join(root, "istio", want[2]))
	if back, _ := snapshot.FromYAML(data); back.Hash != updated.Hash {
		t.Error("file not updated")
	}

	// prune=true removes them, in this backend only.
	if errs, err := d.Apply(ctx, "istio", snap(t, updated), true); err != nil || len(errs) != 0 {
		t.Fatalf("Apply(prune=true) = %v, %v", errs, err)
	}
	if got := listDir(t, filepath.Join(root, "istio")); !slices.Equal(got, want[2:]) {
		t.Errorf("files after prune = %v, want %v", got, want[2:])
	}
	if got := listDir(t, filepath.Join(root, "cilium")); len(got) != 1 {
		t.Errorf("cilium files = %v, want one", got)
	}

	for _, bad := range []string{"", "..", "a/b"} {
		if _, err := d.Apply(ctx, bad, snap(t), true); err == nil {
			t.Errorf("Apply(%q) succeeded, want error", bad)
		}
	}
}

// readBack reads what Dir wrote under root/out for backend, checking that
// every file under root is one resource directly in out/<backend>/, named by
// FileName and no longer than maxFileName, and that no two names differ
// only in case.
func readBack(t *testing.T, root, backend string) *snapshot.Snapshot {
	t.Helper()
	dir := filepath.Join(root, "out", backend)
	var rs []snapshot.Resource
	lower := map[string]string{}
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if filepath.Dir(path) != dir {
			if !strings.HasPrefix(path, filepath.Join(root, "out")+string(filepath.Separator)) {
				t.Errorf("%s is outside the output directory", path)
			}
			return nil
		}
		name := e.Name()
		if len(name) > maxFileName {
			t.Errorf("file name of %d bytes: %s", len(name), name)
		}
		if other, ok := lower[strings.ToLower(name)]; ok {
			t.Errorf("%s and %s differ only in case", name, other)
		}
		lower[strings.ToLower(name)] = name
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		r, err := snapshot.FromYAML(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return nil
		}
		if want := FileName(r.ID); name != want {
			t.Errorf("%s holds %s, whose file is %s", name, r.ID, want)
		}
		if id, ok := parseFileName(name); ok {
			want := snapshot.ID{Group: r.ID.Group, Kind: strings.ToLower(r.ID.Kind), Namespace: r.ID.Namespace, Name: r.ID.Name}
			if id != want {
				t.Errorf("parseFileName(%q) = %v, want %v", name, id, want)
			}
		} else if !strings.Contains(name, "~") {
			t.Errorf("parseFileName(%q) failed", name)
		}
		rs = append(rs, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.New(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkRoundTrip applies desired with pruning and asserts that exactly it
// is read back.
func checkRoundTrip(t *testing.T, root, backend string, desired *snapshot.Snapshot) {
	t.Helper()
	errs, err := NewDir(filepath.Join(root, "out")).Apply(context.Background(), backend, desired, true)
	if err != nil || len(errs) != 0 {
		t.Fatalf("Apply() = %v, %v", errs, err)
	}
	got := readBack(t, root, backend)
	if got.Hash() == desired.Hash() {
		return
	}
	for r := range desired.All() {
		if g, ok := got.Get(r.ID); !ok || g.Hash != r.Hash {
			t.Errorf("%s: lost or changed", r.ID)
		}
	}
	for r := range got.All() {
		if _, ok := desired.Get(r.ID); !ok {
			t.Errorf("%s: not desired", r.ID)
		}
	}
}

// Every output of the plugins' golden files is written and read back
// exactly, Envoy's listeners named like "grpc/server?xds...=10.1.0.11:8080"
// included, each output replacing the previous one of its backend.
func TestDirRoundTripPluginOutputs(t *testing.T) {
	goldens, err := filepath.Glob(filepath.Join("..", "..", "..", "plugins", "*", "testdata", "*.golden.yaml"))
	if err != nil || len(goldens) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	root := t.TempDir()
	kinds := map[string]int{}
	slashes := 0
	for _, g := range goldens {
		data, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		var golden struct {
			Outputs []struct {
				Cluster, Backend string
				Objects          []map[string]any
			}
		}
		if err := yaml.Unmarshal(data, &golden); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		for _, o := range golden.Outputs {
			var rs []snapshot.Resource
			for _, obj := range o.Objects {
				r, err := snapshot.FromObject(obj)
				if err != nil {
					t.Fatalf("%s: %v", g, err)
				}
				kinds[o.Backend+" "+r.ID.Kind]++
				if strings.Contains(r.ID.Name, "/") {
					slashes++
				}
				rs = append(rs, r)
			}
			t.Run(filepath.Base(g)+"/"+o.Cluster+"/"+o.Backend, func(t *testing.T) {
				checkRoundTrip(t, root, o.Backend, snap(t, rs...))
			})
		}
	}
	for _, k := range []string{"istio VirtualService", "istio DestinationRule", "istio ServiceEntry", "istio AuthorizationPolicy",
		"envoy Listener", "envoy Cluster", "envoy ClusterLoadAssignment", "envoy RouteConfiguration", "cilium CiliumNetworkPolicy"} {
		if kinds[k] == 0 {
			t.Errorf("the golden files have no %s; kinds: %v", k, kinds)
		}
	}
	if slashes == 0 {
		t.Error("no golden output has a name with a slash")
	}
}

// Names chosen to break file names are written and read back exactly, and
// none escapes the directory.
func TestDirRoundTripAdversarialNames(t *testing.T) {
	long := strings.Repeat("x", 300)
	names := []string{
		".", "..", "...", "a/../../b", "../../../../etc/passwd", "/abs", "a/b", "a\\b", "a%2Fb", "%2F", "%", "%zz", "%41",
		"grpc/server?xds.resource.listening_address=0.0.0.0:8080", "outbound|9080||reviews.shop.svc.cluster.local",
		"a_b", "_", "__", "a~b", "a b",
		"Foo", "foo", "FOO", "\u00f1", "n\u0303", "日本語/名前", "a.yaml", ".tmp-1",
		long, long + "y", long + "/", strings.Repeat("/", 300), strings.Repeat("é", 200), strings.Repeat("%", 100),
	}
	// Long names whose cut falls on each byte of an escape.
	for n := 180; n < 210; n++ {
		names = append(names, strings.Repeat("x", n)+strings.Repeat("/", 40))
	}
	// Names with control characters never reach a sink: no resource has one.
	for _, name := range []string{"tab\tnewline\n", "nul\x00"} {
		if _, err := snapshot.FromObject(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}}); err == nil {
			t.Errorf("FromObject accepted the name %q", name)
		}
	}
	var rs []snapshot.Resource
	for _, ns := range []string{"", "ns", "_", "..", "a/b", "NS"} {
		for _, name := range names {
			meta := map[string]any{"name": name}
			if ns != "" {
				meta["namespace"] = ns
			}
			for _, obj := range []map[string]any{
				{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": map[string]any{"name": name}},
				{"apiVersion": "xds.meshrelay.io/v1alpha1", "kind": "Listener", "metadata": meta, "spec": map[string]any{"name": name}},
			} {
				r, err := snapshot.FromObject(obj)
				if err != nil {
					t.Fatal(err)
				}
				rs = append(rs, r)
			}
		}
	}
	root := t.TempDir()
	all := snap(t, rs...)
	checkRoundTrip(t, root, "envoy", all)
	files := listDir(t, filepath.Join(root, "out", "envoy"))
	if len(files) != all.Len() {
		t.Errorf("%d files for %d resources", len(files), all.Len())
	}
	split := regexp.MustCompile(`%.?~`)
	for _, f := range files {
		if split.MatchString(f) {
			t.Errorf("%s: the cut splits an escape", f)
		}
	}
	// Pruning down to half of them keeps exactly that half.
	checkRoundTrip(t, root, "envoy", snap(t, rs[:len(rs)/2]...))
}

func TestFileName(t *testing.T) {
	for _, tc := range []struct {
		id   snapshot.ID
		want string
	}{
		{snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "bookinfo", Name: "ours"}, "configmap.core_bookinfo_ours.yaml"},
		{snapshot.ID{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService", Namespace: "bookinfo", Name: "reviews"}, "virtualservice.networking.istio.io_bookinfo_reviews.yaml"},
		{snapshot.ID{Group: "cilium.io", Version: "v2", Kind: "CiliumClusterwideNetworkPolicy", Name: "a.b-c"}, "ciliumclusterwidenetworkpolicy.cilium.io___a.b-c.yaml"},
		{snapshot.ID{Group: "xds.meshrelay.io", Version: "v1alpha1", Kind: "Listener", Namespace: "edge", Name: "grpc/server?xds.resource.listening_address=0.0.0.0:8080"},
			"listener.xds.meshrelay.io_edge_grpc%2Fserver%3Fxds.resource.listening%5Faddress%3D0.0.0.0%3A8080.yaml"},
		{snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "_", Name: "a%2FB"}, "configmap.core_%5F_a%252%46%42.yaml"},
	} {
		if got := FileName(tc.id); got != tc.want {
			t.Errorf("FileName(%v) = %q, want %q", tc.id, got, tc.want)
		}
	}
	for _, bad := range []string{"configmap.core_ns_a%2fb.yaml", "configmap.core_ns_A.yaml", "configmap.core_ns_a%2.yaml", "configmap.core_ns.yaml", "configmap.core__a.yaml"} {
		if id, ok := parseFileName(bad); ok {
			t.Errorf("parseFileName(%q) = %v, want not a file name of FileName", bad, id)
		}
	}
}

// Two resources that would share a file are reported, not overwritten.
func TestDirApplySharedFile(t *testing.T) {
	a := configMap(t, "ns", "same", "a")
	b, err := snapshot.FromObject(map[string]any{"apiVersion": "v2", "kind": "ConfigMap", "metadata": map[string]any{"name": "same", "namespace": "ns"}})
	if err != nil {
		t.Fatal(err)
	}
	errs, err := NewDir(t.TempDir()).Apply(context.Background(), "istio", snap(t, a, b), true)
	if err != nil || len(errs) != 1 || errs[b.ID] == nil || !strings.Contains(errs[b.ID].Error(), b.ID.String()) {
		t.Fatalf("Apply() = %v, %v; want an error naming %s", errs, err, b.ID)
	}
}

func TestMatches(t *testing.T) {
	tests := map[string]struct {
		desired, live map[string]any
		want          bool
	}{
		"live has defaults": {
			desired: map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}},
			live:    map[string]any{"spec": map[string]any{"clusterIP": "10.0.0.1", "ports": []any{map[string]any{"port": int64(80), "protocol": "TCP"}}}},
			want:    true,
		},
		"changed value": {
			desired: map[string]any{"spec": map[string]any{"weight": int64(80)}},
			live:    map[string]any{"spec": map[string]any{"weight": int64(20)}},
		},
		"list element removed": {
			desired: map[string]any{"spec": map[string]any{"hosts": []any{"a", "b"}}},
			live:    map[string]any{"spec": map[string]any{"hosts": []any{"a"}}},
		},
		"label removed": {
			desired: map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "1"}}},
			live:    map[string]any{"metadata": map[string]any{"labels": map[string]any{}, "uid": "x"}},
		},
		"other metadata ignored": {
			desired: map[string]any{"metadata": map[string]any{"name": "n", "labels": map[string]any{"a": "1"}}},
			live:    map[string]any{"metadata": map[string]any{"name": "n", "labels": map[string]any{"a": "1", "b": "2"}, "uid": "x"}},
			want:    true,
		},
		"number kinds": {
			desired: map[string]any{"spec": map[string]any{"x": float64(2)}},
			live:    map[string]any{"spec": map[string]any{"x": int64(2)}},
			want:    true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := matches(tc.desired, tc.live); got != tc.want {
				t.Errorf("matches() = %v, want %v", got, tc.want)
			}
		})
	}
}
