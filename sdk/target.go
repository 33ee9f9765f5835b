package sdk

import (
	"context"
	"fmt"
)

// TargetTranslator is an optional capability: a translator that computes one
// target cluster's outputs at a time. The SDK records what each target's
// computation reads from the fleet and, after a change, computes again only
// the targets whose reads the change concerns (in the old or the new state),
// in parallel. A target the change does not concern costs nothing: no
// decode, no encode, no hash.
//
// A translator implementing it still implements [Translator]; its Translate
// can be [TranslateTargets], which computes every target in turn.
type TargetTranslator interface {
	Translator
	// TranslateTarget computes the complete desired outputs of
	// req.Target and emits them into resp, to req.Target only. It must
	// read everything the outputs depend on through req.Fleet and
	// req.Target, and be safe to call concurrently for different targets.
	// Diagnostics go on resp as with Translate; the SDK removes duplicates
	// reported by several targets. An error means the translator could not
	// work at all, and the host keeps delivering the previous outputs.
	TranslateTarget(ctx context.Context, req *TargetRequest, resp *Response) error
}

// TargetRequest is the computation of one target cluster's outputs.
type TargetRequest struct {
	// Target is the cluster whose outputs are computed.
	Target *Cluster
	// Fleet is the whole fleet view; what is read through it is recorded.
	Fleet *Fleet
}

// TranslateTargets computes every cluster of req's fleet with t, one target
// at a time: the whole-fleet Translate of a [TargetTranslator].
func TranslateTargets(ctx context.Context, t TargetTranslator, req *Request, resp *Response) error {
	for _, c := range req.Fleet.d.clusters {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("translate targets: %w", err)
		}
		treq := &TargetRequest{Target: c.handle(req.Fleet.rec), Fleet: req.Fleet}
		tresp := NewResponse(resp.plugin, resp.backends)
		tresp.target = c.name
		if err := t.TranslateTarget(ctx, treq, tresp); err != nil {
			return fmt.Errorf("target %q: %w", c.name, err)
		}
		if err := tresp.Err(); err != nil {
			return err
		}
		resp.outputs = append(resp.outputs, tresp.outputs...)
		resp.Diagnose(tresp.diags...)
	}
	return nil
}

// Shared returns compute's value over the fleet, computed once per state of
// the fleet and shared by every target that asks for the same key. Use it
// for facts derived from many clusters that many targets need, such as the
// trust domains of every cluster of a mesh: a target that uses the value
// depends on the value, not on everything computing it read, so it is
// computed again only when the value changes (compared with
// reflect.DeepEqual).
//
// key names the value and must always come with the same compute; compute
// reads only through the Fleet it is given, must not call Shared, and must
// not keep the Fleet. Callers must not modify the value.
func Shared[T any](f *Fleet, key string, compute func(*Fleet) T) T {
	if f.d.shared == nil {
		return compute(f)
	}
	f.rec.add(read{op: readShared, name: key})
	v := f.d.shared.get(f.d, key, func(f *Fleet) any { return compute(f) })
	return v.(T)
}
