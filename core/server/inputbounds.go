package server

import (
	"fmt"
	"sync"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// held is what a cluster's unfinished input deltas hold on this replica:
// their parts, bytes ([snapshot.Delta.Size], IDs and deletes included)
// and resources (upserts plus deletes).
type held struct{ parts, bytes, resources int }

func (h held) minus(o held) held {
	return held{h.parts - o.parts, h.bytes - o.bytes, h.resources - o.resources}
}

// heldBy returns what an assembler holds.
func heldBy(asm *snapshot.Assembler) held {
	p, b, r := asm.Held()
	return held{p, b, r}
}

// inputBudget counts, per cluster, what the unfinished input deltas of all
// its streams on this replica hold, so that a cluster's streams together
// stay within --max-input-parts, --max-input-bytes and
// --max-input-resources however many of them it opens. The zero value is
// ready.
type inputBudget struct {
	mu   sync.Mutex
	held map[string]held
}

// add adds d (which may be negative) to the cluster's count and returns
// the new count.
func (b *inputBudget) add(cluster string, d held) held {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[string]held{}
	}
	h := b.held[cluster]
	h = held{h.parts + d.parts, h.bytes + d.bytes, h.resources + d.resources}
	if h == (held{}) {
		delete(b.held, cluster)
	} else {
		b.held[cluster] = h
	}
	return h
}

// get returns the cluster's count.
func (b *inputBudget) get(cluster string) held {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[cluster]
}

// checkHeld refuses a cluster's unfinished input over a limit.
func (s *Server) checkHeld(h held) error {
	o := s.opts
	switch {
	case h.parts > o.MaxInputParts:
		return &snapshot.LimitError{Limit: "parts", Max: o.MaxInputParts}
	case h.bytes > o.MaxInputBytes:
		return &snapshot.LimitError{Limit: "bytes", Max: o.MaxInputBytes}
	case h.resources > o.MaxInputResources:
		return &snapshot.LimitError{Limit: "resources", Max: o.MaxInputResources}
	}
	return nil
}

// gatewayGK is the GroupKind of the discovery Gateway an agent computes.
const gatewayGK = discoveryv1alpha1.Group + "/Gateway"

// checkGateways refuses an input whose east-west Gateways, which other
// clusters' outputs reach this cluster through, are invalid
// ([discoveryv1alpha1.Gateway.Validate]: addresses that are not IPs or DNS
// names, too many of them) or too many (discoveryv1alpha1.MaxGateways).
// Agents compute Gateways and send only valid ones; the input as a whole
// is refused rather than stored without the bad one, because the stored
// input must hash as the agent's does. d is the delta that led to next:
// only its upserted Gateways are decoded.
func checkGateways(d snapshot.Delta, next *snapshot.Snapshot) error {
	upserted := false
	for _, r := range d.Upserts {
		if r.ID.GroupKind() != gatewayGK {
			continue
		}
		upserted = true
		var g discoveryv1alpha1.Gateway
		if err := r.Decode(&g); err != nil {
			return fmt.Errorf("input %s: %w", r.ID, err)
		}
		if errs := g.Validate(); len(errs) > 0 {
			return fmt.Errorf("input %s is not used: %w", r.ID, errs.ToAggregate())
		}
	}
	if !upserted {
		return nil
	}
	n := 0
	for r := range next.All() {
		if r.ID.GroupKind() == gatewayGK {
			n++
		}
	}
	if n > discoveryv1alpha1.MaxGateways {
		return fmt.Errorf("input has %d %s objects, over the limit of %d", n, gatewayGK, discoveryv1alpha1.MaxGateways)
	}
	return nil
}
