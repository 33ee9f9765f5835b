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

// collidingHosts returns two remote hosts of namespace ns in cluster
// "east" whose hostnames ask for the same slot.
func collidingHosts(t *testing.T) (a, b serviceKey) {
	t.Helper()
	seen := map[uint32]serviceKey{}
	for i := range 100000 {
		k := serviceKey{Cluster: "east", Namespace: "ns", Name: fmt.Sprintf("s%d", i)}
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
	a, b := collidingHosts(t)
	policy := func(name string, age int, k serviceKey) *policyv1alpha1.TrafficPolicy {
		return &policyv1alpha1.TrafficPolicy{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+age), 0)),
		}}
	}
	for _, older := range []serviceKey{a, b} {
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
