package envoy_test

import (
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// subsetAddresses returns the endpoint addresses of every
// ClusterLoadAssignment of node group node in cluster east, by name.
func subsetAddresses(t *testing.T, res *sdktest.Result, node string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range res.Outputs {
		r, err := xds.Decode(o.Body)
		if err != nil {
			t.Fatal(err)
		}
		cla, ok := r.Message.(*endpointv3.ClusterLoadAssignment)
		if !ok || o.Cluster != "east" || r.NodeID != node {
			continue
		}
		addrs := []string{}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				addrs = append(addrs, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		slices.Sort(addrs)
		out[cla.GetClusterName()] = addrs
	}
	return out
}

// TestSubsetLabels changes the labels subsets are chosen by, a workload's
// pod template labels and then a policy's subset, and checks that each
// subset's ClusterLoadAssignment follows and that the incremental outputs
// equal full translations.
func TestSubsetLabels(t *testing.T) {
	base := loadFleet(t, "subsets")
	relabeled := base.Clone(t)
	d := relabeled.Cluster("east").Object("Deployment", "details-v2")
	get(d, "spec", "template", "metadata", "labels")["version"] = "v3"
	repointed := relabeled.Clone(t)
	for _, p := range repointed.Policies {
		if nameOf(p) != "details-canary" {
			continue
		}
		rules := listOf(get(p, "spec"), "http")
		route := listOf(rules[1].(obj), "route")
		route[1].(obj)["subset"] = obj{"version": "v3"}
	}
	sdktest.CheckIncremental(t, envoy.New(), base.Fixture(t), relabeled.Fixture(t), repointed.Fixture(t), base.Fixture(t))

	const (
		v1 = "svc|east|shop|details|9070|version=v1"
		v2 = "svc|east|shop|details|9070|version=v2"
		v3 = "svc|east|shop|details|9070|version=v3"
	)
	tests := []struct {
		name string
		f    *fleet
		want map[string][]string
	}{
		{"base", base, map[string][]string{v1: {"10.1.0.31", "10.1.0.32"}, v2: {"10.1.0.33"}}},
		// v2's workload now carries v3: the canary's v2 subset is an
		// error and its rule left out (v1's Cluster, resolved before,
		// stays, as for any rule with an unresolved destination), the
		// pinned rule's v3 resolves.
		{"relabeled", relabeled, map[string][]string{v1: {"10.1.0.31", "10.1.0.32"}, v3: {"10.1.0.33"}}},
		{"repointed", repointed, map[string][]string{v1: {"10.1.0.31", "10.1.0.32"}, v3: {"10.1.0.33"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := subsetAddresses(t, sdktest.RunFixture(t, envoy.New(), tc.f.Fixture(t)), "frontend")
			for _, name := range []string{v1, v2, v3} {
				if !slices.Equal(got[name], tc.want[name]) {
					t.Errorf("%s: endpoints %v, want %v", name, got[name], tc.want[name])
				}
			}
		})
	}
}
