package istio

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestGlobalAddressesInRange checks the slots' addresses: inside the
// range, never its first or last address, and one address per slot.
func TestGlobalAddressesInRange(t *testing.T) {
	for _, slot := range []uint32{0, 1, 255, 256, globalAddressSlots - 1} {
		a := netip.MustParseAddr(slotAddress(slot))
		if !globalAddressPrefix.Contains(a) || a == globalAddressPrefix.Addr() || a.String() == "240.241.255.255" {
			t.Errorf("slot %d: address %s, want one inside %s but its first and last", slot, a, globalAddressPrefix)
		}
	}
	if slotAddress(0) != "240.241.0.1" || slotAddress(globalAddressSlots-1) != "240.241.255.254" {
		t.Errorf("first and last slots: %s and %s", slotAddress(0), slotAddress(globalAddressSlots-1))
	}
	// A fixed hostname keeps its address: it is a hash of the name alone.
	if got, want := slotAddress(globalSlot("reviews.bookinfo.svc.east.global")), slotAddress(globalSlot("reviews.bookinfo.svc.east.global")); got != want {
		t.Errorf("address of one host: %s then %s", got, want)
	}
}

// collidingHosts returns two Services of namespace ns in cluster whose
// remote hosts ask for the same slot.
func collidingHosts(t *testing.T, cluster string) (a, b sdk.ServiceKey) {
	t.Helper()
	seen := map[uint32]sdk.ServiceKey{}
	for i := range 100000 {
		k := sdk.ServiceKey{Cluster: cluster, Namespace: "ns", Name: fmt.Sprintf("s%d", i)}
		slot := globalSlot(remoteHost(k))
		if prev, ok := seen[slot]; ok {
			return prev, k
		}
		seen[slot] = k
	}
	t.Fatal("no two hosts share a slot")
	return
}

// TestGlobalAddressCollision gives two hosts that hash alike to policies of
// different ages: the older policy's host keeps its slot, the other takes
// the next, whatever the order of the policies, and each gets a distinct
// address.
func TestGlobalAddressCollision(t *testing.T) {
	a, b := collidingHosts(t, "east")
	policy := func(name string, age int, k sdk.ServiceKey) *policyv1alpha1.TrafficPolicy {
		return &policyv1alpha1.TrafficPolicy{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+age), 0)),
		}}
	}
	for _, older := range []sdk.ServiceKey{a, b} {
		younger := a
		if older == a {
			younger = b
		}
		pOld, pNew := policy("old", 0, older), policy("new", 1, younger)
		plan := &trafficPlan{Traffic: map[sdk.PolicyRef]*trafficFacts{
			sdk.RefOf(pOld): {Accepted: true, Dests: []trafficDest{{Key: older}}},
			sdk.RefOf(pNew): {Accepted: true, Dests: []trafficDest{{Key: younger}}},
		}}
		for _, order := range [][]*policyv1alpha1.TrafficPolicy{{pOld, pNew}, {pNew, pOld}} {
			got := allocateGlobalAddresses(plan, order, nil)
			slot := globalSlot(remoteHost(older))
			want := map[string]string{
				remoteHost(older):   slotAddress(slot),
				remoteHost(younger): slotAddress((slot + 1) % globalAddressSlots),
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("older policy's host %s: addresses %v, want %v", older, got, want)
			}
		}
	}
	// A host of no accepted policy gets no address from the plan.
	plan := &trafficPlan{Traffic: map[sdk.PolicyRef]*trafficFacts{}}
	tp := policy("refused", 0, a)
	plan.Traffic[sdk.RefOf(tp)] = &trafficFacts{Dests: []trafficDest{{Key: a}}}
	if got := allocateGlobalAddresses(plan, []*policyv1alpha1.TrafficPolicy{tp}, nil); len(got) != 0 {
		t.Errorf("refused policy: addresses %v, want none", got)
	}
}

// TestGlobalServiceEntriesHaveAddresses checks every fixture's
// ServiceEntries: one of a host under .global has exactly one address,
// in the range, the same in every cluster, and no two hosts share one;
// other hosts have none.
func TestGlobalServiceEntriesHaveAddresses(t *testing.T) {
	entries := 0
	for _, name := range []string{"access", "bookinfo", "diagnostics", "gateway", "ports", "traffic", "virtualdestination"} {
		t.Run(name, func(t *testing.T) {
			res := sdktest.Run(t, New(), filepath.Join("testdata", name+".yaml"))
			byHost, byAddress := map[string]string{}, map[string]string{}
			for _, o := range res.Outputs {
				if o.Kind != "ServiceEntry" {
					continue
				}
				var se clientnetworking.ServiceEntry
				if err := json.Unmarshal(o.Body, &se); err != nil {
					t.Fatal(err)
				}
				host := se.Spec.Hosts[0]
				id := o.Cluster + " " + o.Namespace + "/" + o.Name
				if !isGlobal(host) {
					if len(se.Spec.Addresses) > 0 {
						t.Errorf("%s: host %s outside .global has addresses %v", id, host, se.Spec.Addresses)
					}
					continue
				}
				entries++
				if len(se.Spec.Addresses) != 1 {
					t.Errorf("%s: host %s has addresses %v, want one", id, host, se.Spec.Addresses)
					continue
				}
				addr := se.Spec.Addresses[0]
				if a, err := netip.ParseAddr(addr); err != nil || !globalAddressPrefix.Contains(a) {
					t.Errorf("%s: address %s of %s is not in %s", id, addr, host, globalAddressPrefix)
				}
				if prev, ok := byHost[host]; ok && prev != addr {
					t.Errorf("%s: host %s has address %s here and %s elsewhere", id, host, addr, prev)
				}
				if prev, ok := byAddress[addr]; ok && prev != host {
					t.Errorf("%s: address %s of %s is also %s's", id, addr, host, prev)
				}
				byHost[host], byAddress[addr] = addr, host
			}
			t.Logf("global hosts: %v", slices.Sorted(maps.Keys(byHost)))
		})
	}
	if entries == 0 {
		t.Error("no fixture has a ServiceEntry of a host under .global")
	}
}

// collisionFleet is a fleet of two Istio clusters, east (clients) and west
// (Services a and b, whose remote hosts ask for one slot, behind an
// east-west gateway), with a TrafficPolicy per Service named: "pa" for a,
// created first, and "pb" for b, created after.
func collisionFleet(t *testing.T, a, b sdk.ServiceKey, policies ...string) *sdktest.Fixture {
	t.Helper()
	raw := func(s string) json.RawMessage {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
		return json.RawMessage(s)
	}
	mesh := func(c string) json.RawMessage {
		return raw(`{"apiVersion":"discovery.meshrelay.io/v1alpha1","kind":"Mesh","metadata":{"name":"istio","namespace":"istio-system"},` +
			`"spec":{"type":"istio","namespace":"istio-system","network":"network-` + c + `"}}`)
	}
	service := func(k sdk.ServiceKey) json.RawMessage {
		return raw(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + k.Name + `","namespace":"` + k.Namespace + `"},` +
			`"spec":{"selector":{"app":"` + k.Name + `"},"ports":[{"name":"tcp","port":5000}]}}`)
	}
	f := &sdktest.Fixture{Clusters: []sdktest.Cluster{
		{Name: "east", Meshes: []string{"istio"}, Objects: []json.RawMessage{mesh("east")}},
		{Name: "west", Meshes: []string{"istio"}, Objects: []json.RawMessage{mesh("west"), service(a), service(b),
			raw(`{"apiVersion":"discovery.meshrelay.io/v1alpha1","kind":"Gateway","metadata":{"name":"eastwest","namespace":"istio-system"},` +
				`"spec":{"mesh":"istio","addresses":["203.0.113.20"],"port":15443,"network":"network-west"}}`)}},
	}}
	created := map[string]string{"pa": "2026-01-01T00:00:00Z", "pb": "2026-01-02T00:00:00Z"}
	target := map[string]sdk.ServiceKey{"pa": a, "pb": b}
	for _, p := range policies {
		f.Policies = append(f.Policies, raw(`{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"TrafficPolicy",`+
			`"metadata":{"name":"`+p+`","namespace":"ns","creationTimestamp":"`+created[p]+`"},`+
			`"spec":{"destinationSelectors":[{"clusters":["west"],"namespaces":["ns"],"names":["`+target[p].Name+`"]}],"http":[{"timeout":"2s"}]}}`))
	}
	return f
}

// TestGlobalAddressCollisionIncremental runs hosts that ask for one slot
// through one session: b alone has its slot; with a, whose policy is
// older, a has the slot and b the next, in both clusters; without a, b has
// its slot again. Each step's outputs equal a full translation's.
func TestGlobalAddressCollisionIncremental(t *testing.T) {
	a, b := collidingHosts(t, "west")
	slot := globalSlot(remoteHost(a))
	own, next := slotAddress(slot), slotAddress((slot+1)%globalAddressSlots)
	steps := []struct {
		policies []string
		want     map[string]string
	}{
		{[]string{"pb"}, map[string]string{remoteHost(b): own}},
		{[]string{"pa", "pb"}, map[string]string{remoteHost(a): own, remoteHost(b): next}},
		{[]string{"pb"}, map[string]string{remoteHost(b): own}},
	}
	var fixtures []*sdktest.Fixture
	for _, s := range steps {
		fixtures = append(fixtures, collisionFleet(t, a, b, s.policies...))
	}
	sdktest.CheckIncremental(t, New(), fixtures...)
	for i, s := range steps {
		res := sdktest.RunFixture(t, New(), fixtures[i])
		got := map[string]string{}
		entries := 0
		for _, o := range res.Outputs {
			if o.Kind != "ServiceEntry" {
				continue
			}
			var se clientnetworking.ServiceEntry
			if err := json.Unmarshal(o.Body, &se); err != nil {
				t.Fatal(err)
			}
			entries++
			if prev, ok := got[se.Spec.Hosts[0]]; ok && prev != se.Spec.Addresses[0] {
				t.Errorf("step %d: %s has %s in one cluster, %s in another", i, se.Spec.Hosts[0], prev, se.Spec.Addresses[0])
			}
			got[se.Spec.Hosts[0]] = se.Spec.Addresses[0]
		}
		if entries != 2*len(s.want) {
			t.Errorf("step %d: %d ServiceEntries, want an import and an export per host", i, entries)
		}
		if fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("step %d (policies %v): addresses %v, want %v", i, s.policies, got, s.want)
		}
	}
}
