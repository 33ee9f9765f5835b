package server

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
)

// indexTestObject is a ConfigMap output naming its parent policies, with
// a label saying its revision.
func indexTestObject(t testing.TB, name, rev string, policies ...string) snapshot.Resource {
	t.Helper()
	r, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"ns","labels":{"rev":%q},"annotations":{%q:%q}}}`,
		name, rev, meta.PoliciesAnnotation, meta.JoinPolicies(policies)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func indexTestSet(t testing.TB, rs ...snapshot.Resource) *snapshot.Snapshot {
	t.Helper()
	s, err := snapshot.New(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The output index, kept up to date output by output as they change,
// holds what indexing each current output afresh gives: every resource's
// policies and labels, and each output's policies, for every key it still
// has and none other.
func TestOutputIndexIncrementalEqualsFull(t *testing.T) {
	const (
		access  = "AccessPolicy/ns/a"
		traffic = "TrafficPolicy/ns/t"
		virtual = "VirtualDestination/ns/v"
	)
	east, west := engine.OutputKey{Cluster: "east", Backend: "istio"}, engine.OutputKey{Cluster: "west", Backend: "istio"}
	westCilium := engine.OutputKey{Cluster: "west", Backend: "cilium"}
	steps := []struct {
		name string
		// sets are the current outputs after the step; keys left out are
		// gone.
		sets map[engine.OutputKey]*snapshot.Snapshot
	}{
		{"first outputs", map[engine.OutputKey]*snapshot.Snapshot{
			east: indexTestSet(t, indexTestObject(t, "a", "1", access), indexTestObject(t, "b", "1", access, traffic)),
			west: indexTestSet(t, indexTestObject(t, "a", "1", access)),
		}},
		{"a resource changes its policies and labels", map[engine.OutputKey]*snapshot.Snapshot{
			east: indexTestSet(t, indexTestObject(t, "a", "2", traffic), indexTestObject(t, "b", "1", access, traffic)),
			west: indexTestSet(t, indexTestObject(t, "a", "1", access)),
		}},
		{"resources come and go, a backend comes", map[engine.OutputKey]*snapshot.Snapshot{
			east:       indexTestSet(t, indexTestObject(t, "b", "1", access, traffic), indexTestObject(t, "c", "1", virtual)),
			west:       indexTestSet(t, indexTestObject(t, "a", "1", access), indexTestObject(t, "d", "1")),
			westCilium: indexTestSet(t, indexTestObject(t, "np", "1", access)),
		}},
		{"a cluster leaves", map[engine.OutputKey]*snapshot.Snapshot{
			westCilium: indexTestSet(t, indexTestObject(t, "np", "2", access)),
		}},
		{"it empties", map[engine.OutputKey]*snapshot.Snapshot{
			westCilium: indexTestSet(t),
		}},
	}
	var x outputIndex
	for _, step := range steps {
		for _, k := range slices.SortedFunc(maps.Keys(step.sets), cmpKey) {
			got := x.of(k, step.sets[k])
			if again := x.of(k, step.sets[k]); again != got {
				t.Errorf("%s: %v indexed again although its output did not change", step.name, k)
			}
		}
		x.retain(func(k engine.OutputKey) bool { return step.sets[k] != nil })
		if got, want := slices.Collect(maps.Keys(x.outputs)), slices.Collect(maps.Keys(step.sets)); !sameKeys(got, want) {
			t.Errorf("%s: index holds %v, want %v", step.name, got, want)
		}
		for k, set := range step.sets {
			full := indexOutput(set, nil)
			got := x.outputs[k]
			// Both listed by policy, which each does on first asking.
			got.policyResources()
			full.policyResources()
			if !reflect.DeepEqual(got, full) {
				t.Errorf("%s: index of %v = %s, want %s as indexed afresh", step.name, k, indexSummary(got), indexSummary(full))
			}
		}
	}
	// What the steps built, spelled out for the last output with resources.
	o := indexOutput(steps[2].sets[east], nil)
	if !o.has(access) || !o.has(traffic) || !o.has(virtual) || o.has("AccessPolicy/ns/other") {
		t.Errorf("east's policies = %v, want %s, %s and %s", slices.Sorted(maps.Keys(o.policyResources())), access, traffic, virtual)
	}
	var got indexedResource
	for _, got = range o.resources {
		break
	}
	if got.ID.Name != "b" || !slices.Equal(got.policies, []string{access, traffic}) || got.labels["rev"] != "1" {
		t.Errorf("east's first resource = %s %v %v, want b of %s and %s labelled rev=1", got.ID.Name, got.policies, got.labels, access, traffic)
	}
}

func cmpKey(a, b engine.OutputKey) int {
	return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Backend, b.Backend))
}

func sameKeys(a, b []engine.OutputKey) bool {
	slices.SortFunc(a, cmpKey)
	slices.SortFunc(b, cmpKey)
	return slices.Equal(a, b)
}

// indexSummary prints an indexed output's resources with their policies
// and labels.
func indexSummary(o *indexedOutput) string {
	if o == nil {
		return "none"
	}
	out := fmt.Sprintf("set %s policies %v:", o.set.Hash(), o.policyResources())
	for _, r := range o.resources {
		out += fmt.Sprintf(" %s%v%v", r.ID.Name, r.policies, r.labels)
	}
	return out
}

// An edit that changes some resources of an output leaves equal policies
// and labels shared between the changed resources and the unchanged ones:
// one instance for each content, as indexing the output afresh gives, not
// one held over from before the edit beside one made for it.
func TestOutputIndexEditSharesEqualMeta(t *testing.T) {
	const access, traffic = "AccessPolicy/ns/a", "TrafficPolicy/ns/t"
	var x outputIndex
	key := engine.OutputKey{Cluster: "east", Backend: "istio"}
	x.of(key, indexTestSet(t, indexTestObject(t, "a", "1", access), indexTestObject(t, "b", "1", access), indexTestObject(t, "c", "1", access, traffic)))
	// a changes its content (its name stays), b and c do not.
	changed, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","labels":{"rev":"1"},"annotations":{%q:%q}},"data":{"edit":"1"}}`,
		meta.PoliciesAnnotation, access))
	if err != nil {
		t.Fatal(err)
	}
	o := x.of(key, indexTestSet(t, changed, indexTestObject(t, "b", "1", access), indexTestObject(t, "c", "1", access, traffic)))
	labels, policies := map[uintptr]bool{}, map[uintptr]bool{}
	for _, r := range o.resources {
		labels[reflect.ValueOf(r.labels).Pointer()] = true
		if r.ID.Name != "c" {
			policies[reflect.ValueOf(r.policies).Pointer()] = true
		}
	}
	if len(labels) != 1 {
		t.Errorf("after the edit the output's resources hold %d instances of their equal labels, want 1", len(labels))
	}
	if len(policies) != 1 {
		t.Errorf("after the edit a and b hold %d instances of their equal policies, want 1", len(policies))
	}
}

// BenchmarkIndexOutput indexes 1,000 outputs of 44 resources each, as an
// agent's Istio output holds under a fleet-wide AccessPolicy (every
// resource its child, a quarter also of a TrafficPolicy, all with the same
// labels), and holds every index: it reports the time per output and the
// heap each index holds beside its set (heap-B/output).
func BenchmarkIndexOutput(b *testing.B) {
	const outputs, perOutput = 1000, 44
	const access, traffic = "AccessPolicy/fleet/all", "TrafficPolicy/ns/retries"
	sets := make([]*snapshot.Snapshot, outputs)
	for i := range sets {
		rs := make([]snapshot.Resource, perOutput)
		for j := range rs {
			policies := []string{access}
			if j%4 == 0 {
				policies = append(policies, traffic)
			}
			rs[j] = indexTestObject(b, fmt.Sprintf("c%04d-svc-%03d", i, j), "1", policies...)
		}
		sets[i] = indexTestSet(b, rs...)
	}
	var held []*indexedOutput
	var before, after runtime.MemStats
	for b.Loop() {
		b.StopTimer()
		held = make([]*indexedOutput, outputs)
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for i, set := range sets {
			held[i] = indexOutput(set, nil)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.StartTimer()
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/outputs, "heap-B/output")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*outputs), "ns/output")
	runtime.KeepAlive(held)
}

// BenchmarkIndexOutputEdit indexes, after an edit, 1,000 outputs of 44
// resources each whose every resource's content changed but not its
// metadata, as a fleet-wide edit of a policy's rules does to an agent's
// Istio output: the time per output, given the index of the output
// before the edit.
func BenchmarkIndexOutputEdit(b *testing.B) {
	const outputs, perOutput = 1000, 44
	const access = "AccessPolicy/fleet/all"
	sets := func(edit string) []*snapshot.Snapshot {
		sets := make([]*snapshot.Snapshot, outputs)
		for i := range sets {
			rs := make([]snapshot.Resource, perOutput)
			for j := range rs {
				r, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c%04d-svc-%03d","namespace":"ns","labels":{"rev":"1"},"annotations":{%q:%q}},"data":{"paths":"/%s/*"}}`,
					i, j, meta.PoliciesAnnotation, access, edit))
				if err != nil {
					b.Fatal(err)
				}
				rs[j] = r
			}
			sets[i] = indexTestSet(b, rs...)
		}
		return sets
	}
	before, after := sets("v1"), sets("v2")
	prev := make([]*indexedOutput, outputs)
	for i, set := range before {
		prev[i] = indexOutput(set, nil)
	}
	for b.Loop() {
		for i, set := range after {
			indexOutput(set, prev[i])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*outputs), "ns/output")
}

// labelsKey tells apart labels that differ only in where one key or value
// ends and the next begins, and none from an empty map.
func TestLabelsKeyIsOneToOne(t *testing.T) {
	labels := []map[string]string{
		nil, {},
		{"": ""}, {"a": ""}, {"": "a"},
		{"a": "b"}, {"ab": ""}, {"a": "b", "c": "d"}, {"a": "b\x01\x01c\x01d"},
		{"a": "b\x01c"}, {"a\x01b": "c"}, {"a": "\x01"}, {"a": "\x00"}, {"a\x01": ""},
		{"k": "{"}, {"k": `","`}, {"k": "", "l": ""}, {"kl": "", "": ""},
		{string(make([]byte, 200)): "v"}, {string(make([]byte, 199)): "\x00v"},
	}
	seen := map[string]int{}
	for i, l := range labels {
		key := labelsKey(l)
		if j, ok := seen[key]; ok {
			t.Errorf("labelsKey(%q) = labelsKey(%q) = %q", l, labels[j], key)
		}
		seen[key] = i
		if again := labelsKey(maps.Clone(l)); again != key {
			t.Errorf("labelsKey(%q) = %q, then %q for a copy", l, key, again)
		}
	}
}
