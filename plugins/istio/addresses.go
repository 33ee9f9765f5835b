package istio

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
)

// globalAddressPrefix is the range of the virtual IPs of the hosts under
// .global: a /16 of Class E (240.0.0.0/4, reserved, never routed), next to
// the 240.240.0.0/16 of Istio's own address auto-allocation so that the
// two never hand out one address to different hosts in one sidecar.
var globalAddressPrefix = netip.MustParsePrefix("240.241.0.0/16")

// globalAddressSlots is how many addresses of the range are handed out:
// every one but the first (.0.0) and the last (.255.255).
const globalAddressSlots = 1<<16 - 2

// globalSlot is the slot a host asks for: a hash of the hostname alone.
func globalSlot(host string) uint32 {
	sum := sha256.Sum256([]byte(host))
	return binary.BigEndian.Uint32(sum[:4]) % globalAddressSlots
}

// slotAddress is the address of a slot.
func slotAddress(slot uint32) string {
	a := globalAddressPrefix.Addr().As4()
	n := binary.BigEndian.Uint32(a[:]) + 1 + slot
	binary.BigEndian.PutUint32(a[:], n)
	return netip.AddrFrom4(a).String()
}

// globalAddress returns the virtual IP of a host under .global: the one the
// plan allocated, else the address of the host's own slot.
func (p *trafficPlan) globalAddress(host string) string {
	if a, ok := p.Addresses[host]; ok {
		return a
	}
	return slotAddress(globalSlot(host))
}

// isGlobal reports whether host is under .global.
func isGlobal(host string) bool {
	return strings.HasSuffix(host, "."+remoteHostSuffix)
}

// allocateGlobalAddresses gives every host under .global that an accepted
// policy may make a ServiceEntry for — the remote host of each destination
// of a TrafficPolicy and of each Service its rules route or mirror to, and
// a VirtualDestination's hostname under .global — a virtual IP. A host
// takes the address of its slot (a hash of the hostname); when two hosts
// ask for one slot, the host of the older policy (the order in which
// policies claim names) keeps it and the other takes the next free slot,
// ties going to the smaller hostname. The result depends on the policies
// and Services of the fleet alone, so every cluster computes the same
// addresses, and a host's address changes only when a host of an older
// policy comes to ask for its slot or the host it gave way to goes.
func allocateGlobalAddresses(p *trafficPlan, tps []*policyv1alpha1.TrafficPolicy, vds []*policyv1alpha1.VirtualDestination) map[string]string {
	rank := map[string]int{}
	var hosts []string
	claim := func(host string, r int) {
		if old, ok := rank[host]; !ok {
			rank[host] = r
			hosts = append(hosts, host)
		} else if r < old {
			rank[host] = r
		}
	}
	var policies []policyv1alpha1.Policy
	for _, tp := range tps {
		policies = append(policies, tp)
	}
	for _, vd := range vds {
		policies = append(policies, vd)
	}
	for r, pol := range byAge(policies) {
		switch pol := pol.(type) {
		case *policyv1alpha1.TrafficPolicy:
			facts := p.Traffic[sdk.RefOf(pol)]
			if facts == nil || !facts.Accepted {
				continue
			}
			for _, d := range facts.Dests {
				if d.Reach == reachable {
					claim(remoteHost(d.Key), r)
				}
			}
			for _, d := range serviceDestinations(pol) {
				claim(remoteHost(sdk.ServiceKey{Cluster: d.Service.Cluster, Namespace: d.Service.Namespace, Name: d.Service.Name}), r)
			}
		case *policyv1alpha1.VirtualDestination:
			facts := p.Virtual[sdk.RefOf(pol)]
			if facts == nil || !facts.Accepted || len(facts.Backing) == 0 || !isGlobal(pol.Spec.Hostname) {
				continue
			}
			claim(pol.Spec.Hostname, r)
		}
	}
	if len(hosts) == 0 {
		return nil
	}
	slices.SortFunc(hosts, func(a, b string) int { return cmp.Or(cmp.Compare(rank[a], rank[b]), cmp.Compare(a, b)) })
	taken := make(map[uint32]bool, len(hosts))
	out := make(map[string]string, len(hosts))
	for _, h := range hosts {
		slot := globalSlot(h)
		for taken[slot] && len(taken) < globalAddressSlots {
			slot = (slot + 1) % globalAddressSlots
		}
		taken[slot] = true
		out[h] = slotAddress(slot)
	}
	return out
}
