package server

import (
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/core/pluginhost"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// reading is an echo translator declaring the kinds it reads.
type reading struct {
	*echo
	inputs []string
}

func (r reading) InputKinds() []string { return r.inputs }

// The Welcome carries the kinds every translator declares it reads and
// the policy kinds, sorted, each once: the agent discovers exactly those.
func TestWelcomeCarriesInputKinds(t *testing.T) {
	ts := startServerDeps(t, nil, "", func(d *Deps) {
		d.Translators = []pluginhost.Translator{
			reading{newEcho(), []string{"example.io/Widget", "/Service"}},
			reading{newEcho(), []string{"/Service", "apps/Deployment", "other.example.io/Gadget"}},
		}
	})
	cert, err := ts.certificate("east", ts.register("east"))
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := syncWith(t, ts, cert, &relayv1.Hello{Cluster: "east"})
	if err != nil || first.GetWelcome() == nil {
		t.Fatalf("Sync = %v, %v; want a Welcome", first, err)
	}
	want := []string{
		"/Service", "apps/Deployment", "example.io/Widget", "other.example.io/Gadget",
		"policy.meshrelay.io/AccessPolicy", "policy.meshrelay.io/MeshTrust",
		"policy.meshrelay.io/RolloutStrategy", "policy.meshrelay.io/TrafficPolicy",
		"policy.meshrelay.io/VirtualDestination",
	}
	if got := first.GetWelcome().GetInputKinds(); !slices.Equal(got, want) {
		t.Errorf("Welcome input kinds = %v, want %v", got, want)
	}
}
