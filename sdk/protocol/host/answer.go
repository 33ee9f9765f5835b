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
	checked checkedSet
	// keys are the digests of the set's resources, which the session
	// keeps as checked once the answer is accepted ([assembly.finish]).
	keys []checkedKey
}

// newAssembly starts the set of key, given the digests of the plugin's
// last answer for it.
func newAssembly(key [2]string, checked checkedSet) *assembly {
	// An answer mostly holds as many resources as the last one did.
	return &assembly{
		key: key, out: ClusterOutput{Cluster: key[0], Backend: key[1], Resources: make([]snapshot.Resource, 0, len(checked))},
		seen: make(map[snapshot.ID]bool, len(checked)), checked: checked,
		keys: make([]checkedKey, 0, len(checked)),
	}
}

// finish returns the digests of the set's resources, once it is complete.
func (a *assembly) finish() checkedSet { return newCheckedSet(a.keys) }

func (s *Session) receive(ctx context.Context, gen uint64, view View) (Result, error) {
	var (
		res     Result
		pending *assembly
		done    = map[[2]string]bool{}
		// answered are the digests of each set answered.
		answered = map[[2]string]checkedSet{}
	)
	for {
		msg, err := s.stream.Recv()
		if errors.Is(err, io.EOF) {
			return Result{}, fmt.Errorf("plugin closed the session before answering update %d", gen)
		}
		if status.Code(err) == codes.ResourceExhausted {
			return Result{}, fmt.Errorf("%w: a message of the answer to update %d is over the limit: %w", ErrProtocol, gen, err)
		}
		if err != nil {
			return Result{}, fmt.Errorf("receive answer to update %d: %w", gen, s.streamErr(ctx, err))
		}
		switch m := msg.GetMsg().(type) {
		case *translatorv1.TranslateResponse_Output:
			o := m.Output
			key := [2]string{o.GetCluster(), o.GetBackend()}
			if pending == nil {
				if err := s.checkTarget(key, view, done); err != nil {
					return Result{}, err
				}
				pending = newAssembly(key, s.checked[key])
			} else if pending.key != key {
				return Result{}, fmt.Errorf("%w: output part for cluster %q backend %q while the set of cluster %q backend %q was unfinished",
					ErrProtocol, key[0], key[1], pending.key[0], pending.key[1])
			}
			if err := s.addResources(pending, o.GetResources()); err != nil {
				return Result{}, err
			}
			if !o.GetMore() {
				done[key] = true
				res.Outputs = append(res.Outputs, pending.out)
				answered[key] = pending.finish()
				pending = nil
			}
		case *translatorv1.TranslateResponse_Diagnostic:
			res.Diagnostics = append(res.Diagnostics, meta.DiagnosticFromProto(m.Diagnostic, s.plugin))
		case *translatorv1.TranslateResponse_Done:
			if g := m.Done.GetGeneration(); g != gen {
				return Result{}, fmt.Errorf("%w: done for update %d, want %d", ErrProtocol, g, gen)
			}
			if e := m.Done.GetError(); e != "" {
				return Result{}, fmt.Errorf("plugin %q: %w: %s", s.plugin, ErrPluginFailed, e)
			}
			if pending != nil {
				return Result{}, fmt.Errorf("%w: done before the last part of cluster %q backend %q", ErrProtocol, pending.key[0], pending.key[1])
			}
			s.answered = answered
			slices.SortFunc(res.Outputs, func(a, b ClusterOutput) int {
				return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Backend, b.Backend))
			})
			return res, nil
		default:
			return Result{}, fmt.Errorf("%w: unknown answer %T", ErrProtocol, m)
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

// addResources validates resources and adds them to the set.
func (s *Session) addResources(a *assembly, rs []*snapshotv1.Resource) error {
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
		if !a.checked.has(k) {
			if err := checkBody(r); err != nil {
				return fmt.Errorf("%w: malformed output for cluster %q: %w", ErrProtocol, a.key[0], err)
			}
		}
		if a.seen[r.ID] {
			return fmt.Errorf("%w: output for cluster %q has %s twice", ErrProtocol, a.key[0], r.ID)
		}
		a.seen[r.ID] = true
		a.size += len(r.Body)
		if a.size > s.maxOutput {
			return fmt.Errorf("%w: output for cluster %q backend %q exceeds %d bytes", ErrProtocol, a.key[0], a.key[1], s.maxOutput)
		}
		a.out.Resources = append(a.out.Resources, r)
		a.keys = append(a.keys, k)
	}
	return nil
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
