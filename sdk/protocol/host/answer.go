package host

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// assembly collects the parts of one output set.
type assembly struct {
	key  [2]string
	out  ClusterOutput
	size int
	seen map[snapshot.ID]bool
	// checked are the digests of the resources of the plugin's last
	// answer for key, which need no check again (byte for byte the same
	// identity and body); nil for none.
	checked protocol.KeySet
	// keys are the digests of the set's resources, which the session
	// keeps as checked once the answer is accepted ([assembly.finish]).
	keys []protocol.ResourceKey
	// delivered is the set the host holds, where the kept resources are
	// taken from; looked up at the first one.
	delivered       *snapshot.Snapshot
	lookedDelivered bool
	// next is where in delivered the next kept resource is looked up
	// first: the plugin names them in order (snapshot.Snapshot.Seek).
	next int
	// lost is set when a kept resource is not in delivered as the
	// plugin last answered it: the set cannot be assembled.
	lost bool
}

// newAssembly starts the set of key, given the digests of the plugin's
// last answer for it.
func newAssembly(key [2]string, checked protocol.KeySet) *assembly {
	// An answer mostly holds as many resources as the last one did.
	return &assembly{
		key: key, out: ClusterOutput{Cluster: key[0], Backend: key[1], Resources: make([]snapshot.Resource, 0, len(checked))},
		seen: make(map[snapshot.ID]bool, len(checked)), checked: checked,
		keys: make([]protocol.ResourceKey, 0, len(checked)),
	}
}

// reserve makes room for n more resources: a set answered in one message,
// as most are, is then held in one array of its length, rather than one
// grown by appends, each growth garbage, and copied to fit at the end.
func (a *assembly) reserve(n int) {
	a.out.Resources = withRoom(a.out.Resources, n)
	a.keys = withRoom(a.keys, n)
}

// withRoom returns s with room for n more elements: s itself if it has
// it; for the first part of a set, an array of exactly that capacity
// (slices.Grow rounds up to the allocator's size, which fitted would
// then cut); for a later part, slices.Grow's, whose growth is amortized
// over many parts.
func withRoom[T any](s []T, n int) []T {
	switch {
	case cap(s)-len(s) >= n:
		return s
	case len(s) == 0:
		return make([]T, 0, n)
	}
	return slices.Grow(s, n)
}

// finish completes the set: its resources are cut to their number, since
// the engine keeps them as the cluster's output, and it returns their
// digests.
func (a *assembly) finish() protocol.KeySet {
	a.out.Resources = fitted(a.out.Resources)
	return protocol.NewKeySet(a.keys)
}

// fitted returns rs in an array of its length. An answer's resources are
// appended as its parts come, so the array may be up to twice as long as
// the set, and the engine holds a cluster's output as long as it stands.
func fitted(rs []snapshot.Resource) []snapshot.Resource {
	if cap(rs)-len(rs) <= len(rs)/16 {
		return rs
	}
	return append(make([]snapshot.Resource, 0, len(rs)), rs...)
}

// receive reads the plugin's answer to update u, numbered gen, and checks
// and assembles its sets. A set whose kept resources the host no longer
// holds as the plugin last answered them is left out, and its cluster
// returned in lost: the caller asks for it whole.
func (s *Session) receive(ctx context.Context, gen uint64, view View, u update) (res Result, lost []string, err error) {
	var (
		pending *assembly
		done    = map[[2]string]bool{}
		// answered are the digests of each set answered.
		answered = map[[2]string]protocol.KeySet{}
		resend   = map[string]bool{}
		lostSet  = map[string]bool{}
		// sent are the resources the answer sent, which later sets may
		// name.
		sent sentResources
	)
	for _, c := range u.resend {
		resend[c] = true
	}
	for {
		msg, err := s.stream.Recv()
		if errors.Is(err, io.EOF) {
			return Result{}, nil, fmt.Errorf("plugin closed the session before answering update %d", gen)
		}
		if status.Code(err) == codes.ResourceExhausted {
			return Result{}, nil, fmt.Errorf("%w: a message of the answer to update %d is over the limit: %w", ErrProtocol, gen, err)
		}
		if err != nil {
			return Result{}, nil, fmt.Errorf("receive answer to update %d: %w", gen, s.streamErr(ctx, err))
		}
		switch m := msg.GetMsg().(type) {
		case *translatorv1.TranslateResponse_Output:
			o := m.Output
			key := [2]string{o.GetCluster(), o.GetBackend()}
			if pending == nil {
				if err := s.checkTarget(key, view, done); err != nil {
					return Result{}, nil, err
				}
				pending = newAssembly(key, s.checked[key])
			} else if pending.key != key {
				return Result{}, nil, fmt.Errorf("%w: output part for cluster %q backend %q while the set of cluster %q backend %q was unfinished",
					ErrProtocol, key[0], key[1], pending.key[0], pending.key[1])
			}
			pending.reserve(len(o.GetResources()) + len(o.GetKept()) + len(o.GetSame()))
			if err := s.addResources(pending, o.GetResources(), &sent); err != nil {
				return Result{}, nil, err
			}
			if same := o.GetSame(); len(same) > 0 {
				if !u.sameAllowed {
					return Result{}, nil, fmt.Errorf("%w: output for cluster %q backend %q names resources sent earlier, which the update did not allow", ErrProtocol, key[0], key[1])
				}
				if err := s.addSame(pending, same, &sent); err != nil {
					return Result{}, nil, err
				}
			}
			if kept := o.GetKept(); len(kept) > 0 {
				if !u.keptAllowed || resend[key[0]] {
					return Result{}, nil, fmt.Errorf("%w: output for cluster %q backend %q keeps resources of an earlier answer, which the update did not allow", ErrProtocol, key[0], key[1])
				}
				if err := s.addKept(pending, kept, view); err != nil {
					return Result{}, nil, err
				}
			}
			if !o.GetMore() {
				done[key] = true
				if pending.lost {
					if !lostSet[key[0]] {
						lostSet[key[0]] = true
						lost = append(lost, key[0])
					}
				} else {
					answered[key] = pending.finish()
					res.Outputs = append(res.Outputs, pending.out)
				}
				pending = nil
			}
		case *translatorv1.TranslateResponse_Diagnostic:
			res.Diagnostics = append(res.Diagnostics, meta.DiagnosticFromProto(m.Diagnostic, s.plugin))
		case *translatorv1.TranslateResponse_Done:
			if g := m.Done.GetGeneration(); g != gen {
				return Result{}, nil, fmt.Errorf("%w: done for update %d, want %d", ErrProtocol, g, gen)
			}
			s.takesSame = m.Done.GetTakesSameTargets()
			if e := m.Done.GetError(); e != "" {
				return Result{}, nil, fmt.Errorf("plugin %q: %w: %s", s.plugin, ErrPluginFailed, e)
			}
			if pending != nil {
				return Result{}, nil, fmt.Errorf("%w: done before the last part of cluster %q backend %q", ErrProtocol, pending.key[0], pending.key[1])
			}
			s.answered = answered
			slices.SortFunc(res.Outputs, compareOutputs)
			return res, lost, nil
		default:
			return Result{}, nil, fmt.Errorf("%w: unknown answer %T", ErrProtocol, m)
		}
	}
}

func (s *Session) checkTarget(key [2]string, view View, done map[[2]string]bool) error {
	_, inView := view.Clusters[key[0]]
	switch {
	case !inView:
		return fmt.Errorf("%w: output for cluster %q, which is not in the fleet view", ErrProtocol, key[0])
	case !slices.Contains(s.backends, key[1]):
		return fmt.Errorf("%w: output for backend %q, which the plugin does not serve (%v)", ErrProtocol, key[1], s.backends)
	case done[key]:
		return fmt.Errorf("%w: two output sets for cluster %q backend %q", ErrProtocol, key[0], key[1])
	}
	return nil
}

// addResources validates resources and adds them to the set, and to
// sent, the resources the answer sent.
func (s *Session) addResources(a *assembly, rs []*snapshotv1.Resource, sent *sentResources) error {
	for _, p := range rs {
		id, err := snapshot.IDFromProto(p.GetId())
		if err != nil {
			return fmt.Errorf("%w: malformed output for cluster %q: %w", ErrProtocol, a.key[0], err)
		}
		// checkBody's decode validates the whole body, so the resource is
		// built without snapshot.ResourceFromProto's separate validity
		// pass: outputs are the host's largest input.
		r := snapshot.Resource{ID: id, Body: p.GetBody(), Hash: sha256.Sum256(p.GetBody())}
		k := keyOf(r)
		if !a.checked.Has(k) && !s.bodies.has(k) {
			if err := checkBody(r); err != nil {
				return fmt.Errorf("%w: malformed output for cluster %q: %w", ErrProtocol, a.key[0], err)
			}
			s.bodies.add(k)
		}
		if err := a.see(r.ID); err != nil {
			return err
		}
		r.Body = snapshot.InternBody(r.Body, r.Hash)
		sent.add(r, k)
		if err := a.add(r, k, s.maxOutput); err != nil {
			return err
		}
	}
	return nil
}

// addSame adds to the set the resources the answer sent earlier that it
// names, taken from sent as they were checked there.
func (s *Session) addSame(a *assembly, same []uint32, sent *sentResources) error {
	for _, n := range same {
		r, ok := sent.get(n)
		if !ok {
			return fmt.Errorf("%w: output for cluster %q names resource %d of the answer, which sent %d that may be named",
				ErrProtocol, a.key[0], n, sent.held())
		}
		if err := a.see(r.ID); err != nil {
			return err
		}
		if err := a.add(r.Resource, r.key, s.maxOutput); err != nil {
			return err
		}
	}
	return nil
}

// sentResources are the resources an answer sent, numbered from 0 in the
// order they came, which its later sets may name instead of sending them
// again (ClusterOutput.same): the first protocol.MaxSameBodies of them.
type sentResources struct {
	sent []sentResource
}

// sentResource is a resource sent, checked, with its key.
type sentResource struct {
	snapshot.Resource
	key protocol.ResourceKey
}

// add numbers r, sent: the next number, which only the first
// protocol.MaxSameBodies may be named by.
func (b *sentResources) add(r snapshot.Resource, k protocol.ResourceKey) {
	if len(b.sent) < protocol.MaxSameBodies {
		b.sent = append(b.sent, sentResource{r, k})
	}
}

// get returns resource n, if the answer sent it and it may be named.
func (b *sentResources) get(n uint32) (sentResource, bool) {
	if int64(n) >= int64(len(b.sent)) {
		return sentResource{}, false
	}
	return b.sent[n], true
}

// held is how many resources may be named so far.
func (b *sentResources) held() int { return len(b.sent) }

// see records that the set names id, which it may name once.
func (a *assembly) see(id snapshot.ID) error {
	if a.seen[id] {
		return fmt.Errorf("%w: output for cluster %q has %s twice", ErrProtocol, a.key[0], id)
	}
	a.seen[id] = true
	return nil
}

// add adds r, whose key is k, to the set, whose bodies may add up to
// maxOutput bytes.
func (a *assembly) add(r snapshot.Resource, k protocol.ResourceKey, maxOutput int) error {
	a.size += len(r.Body)
	if a.size > maxOutput {
		return fmt.Errorf("%w: output for cluster %q backend %q exceeds %d bytes", ErrProtocol, a.key[0], a.key[1], maxOutput)
	}
	a.out.Resources = append(a.out.Resources, r)
	a.keys = append(a.keys, k)
	return nil
}

// addKept adds to the set the resources the plugin kept of its last
// answer for it, taken from the set the host holds (View.Delivered). The
// set is lost when one of them is not there as the plugin last answered it
// (the host's set changed since, or the plugin names what it did not
// answer): its other parts are still read, and then it is left out.
func (s *Session) addKept(a *assembly, ids []*snapshotv1.ResourceID, view View) error {
	if !a.lookedDelivered {
		a.lookedDelivered = true
		if view.Delivered != nil {
			a.delivered, _ = view.Delivered(a.key[0], a.key[1])
		}
	}
	for _, p := range ids {
		id, err := snapshot.IDFromProto(p)
		if err != nil {
			return fmt.Errorf("%w: malformed output for cluster %q: kept: %w", ErrProtocol, a.key[0], err)
		}
		if err := a.see(id); err != nil {
			return err
		}
		if a.lost {
			continue
		}
		var r snapshot.Resource
		ok := a.delivered != nil
		if ok {
			r, a.next, ok = a.delivered.Seek(id, a.next)
		}
		k := keyOf(r)
		if !ok || !a.checked.Has(k) {
			a.lost = true
			continue
		}
		if err := a.add(r, k, s.maxOutput); err != nil {
			return err
		}
	}
	return nil
}

// compareOutputs orders sets by cluster and backend.
func compareOutputs(a, b ClusterOutput) int {
	return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Backend, b.Backend))
}

// checkBody checks that a body is a Kubernetes object matching its ID.
func checkBody(r snapshot.Resource) error {
	obj, err := snapshot.DecodeHeader(r.Body)
	if err != nil {
		if _, syntax := errors.AsType[*json.SyntaxError](err); syntax {
			return fmt.Errorf("%s: body is not valid JSON: %w", r.ID, err)
		}
		return fmt.Errorf("%s: body is not an object: %w", r.ID, err)
	}
	switch {
	case obj.Kind != r.ID.Kind:
		return fmt.Errorf("%s: body has kind %q", r.ID, obj.Kind)
	case obj.Metadata.Name != r.ID.Name:
		return fmt.Errorf("%s: body has metadata.name %q", r.ID, obj.Metadata.Name)
	case obj.Metadata.Namespace != r.ID.Namespace:
		return fmt.Errorf("%s: body has metadata.namespace %q", r.ID, obj.Metadata.Namespace)
	case obj.APIVersion != r.ID.APIVersion():
		return fmt.Errorf("%s: body has apiVersion %q", r.ID, obj.APIVersion)
	}
	return nil
}

// checkedBodiesLimit is how many digests a generation of a session's
// checkedBodies holds: 16 bytes each, two generations at most.
const checkedBodiesLimit = 1 << 15

// checkedBodies is a set of digests bounded in generations: when the
// current generation is full it becomes the old one, dropping what the
// old one held, and a digest found in the old one moves into the current
// one. It is not safe for concurrent use.
type checkedBodies struct {
	cur, old map[protocol.ResourceKey]struct{}
	limit    int
}

func newCheckedBodies(limit int) checkedBodies {
	return checkedBodies{cur: map[protocol.ResourceKey]struct{}{}, limit: limit}
}

func (c *checkedBodies) has(k protocol.ResourceKey) bool {
	if _, ok := c.cur[k]; ok {
		return true
	}
	if _, ok := c.old[k]; ok {
		c.add(k)
		return true
	}
	return false
}

func (c *checkedBodies) add(k protocol.ResourceKey) {
	if len(c.cur) >= c.limit {
		c.old, c.cur = c.cur, make(map[protocol.ResourceKey]struct{}, c.limit)
	}
	c.cur[k] = struct{}{}
}

// keyOf returns r's protocol.ResourceKey.
func keyOf(r snapshot.Resource) protocol.ResourceKey { return protocol.KeyOf(r.ID, r.Hash) }
