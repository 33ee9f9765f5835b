package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
)

// PutInput implements store.Inputs. The version check and the write are one
// Lua script, so racing replicas cannot store an older snapshot over a
// newer one.
func (s *Store) PutInput(ctx context.Context, cluster string, snap *snapshot.Snapshot) error {
	_, err := s.putInput(ctx, cluster, nil, snap, false)
	return err
}

// PutInputUnlessRevoked is PutInput unless the cluster's registry record
// is revoked, which the write checks in the same atomic step: it then
// writes nothing and reports revoked. A deregistration revokes the record
// before it deletes the cluster's inputs and outputs, so a write that
// passes the check is deleted by it, and one that comes after is refused.
// store.WriteThrough's queue writes so: another replica's deregistration
// is never undone, and costs no read of the record around each write.
//
// base, when not nil, is the input the writer believes stored, which
// snap replaces: when it is (the same version and hash), the event the
// write publishes carries the delta from base to snap, if it is at most
// maxEventDelta bytes, and the other replicas apply it instead of reading
// snap (store.Event's Delta).
func (s *Store) PutInputUnlessRevoked(ctx context.Context, cluster string, base, snap *snapshot.Snapshot) (revoked bool, err error) {
	return s.putInput(ctx, cluster, base, snap, true)
}

// maxEventDelta bounds the wire size of the delta an input's event
// carries: most changes are a few resources; a larger one is read whole.
const maxEventDelta = 32 << 10

// putInput writes an input, checking the cluster's registry record in
// the script when unlessRevoked.
func (s *Store) putInput(ctx context.Context, cluster string, base, snap *snapshot.Snapshot, unlessRevoked bool) (revoked bool, err error) {
	if err := s.check(); err != nil {
		return false, err
	}
	args, err := s.putInputArgs(cluster, base, snap)
	if err != nil {
		return false, err
	}
	// The index entry goes first: a crash between the two leaves an index
	// entry without a key, which List skips, never a key List cannot see.
	if err := s.client.SAdd(ctx, s.keys.inputs(), cluster).Err(); err != nil {
		return false, s.wrap(fmt.Sprintf("put input %q", cluster), err)
	}
	keys := []string{s.keys.input(cluster)}
	if unlessRevoked {
		keys = append(keys, s.keys.clusters())
	}
	n, err := s.scripts.putInput.Run(ctx, s.client, keys, args...).Int()
	if err != nil {
		return false, s.wrap(fmt.Sprintf("put input %q", cluster), err)
	}
	if n >= 0 {
		return false, nil
	}
	// Refused: the index entry goes unless an input is still stored, which
	// the deregistration's DeleteInput removes with its entry.
	if stored, err := s.client.Exists(ctx, s.keys.input(cluster)).Result(); err == nil && stored == 0 {
		if err := s.client.SRem(ctx, s.keys.inputs(), cluster).Err(); err != nil {
			return true, s.wrap(fmt.Sprintf("put input %q", cluster), err)
		}
	}
	return true, nil
}

// putInputArgs checks a PutInput and returns its script's arguments: the
// event with the delta from base, and base's version and hash, are empty
// without a base or when the delta is too large.
func (s *Store) putInputArgs(cluster string, base, snap *snapshot.Snapshot) ([]any, error) {
	if cluster == "" {
		return nil, errors.New("redis: put input: empty cluster name")
	}
	if snap == nil {
		return nil, fmt.Errorf("redis: put input %q: nil snapshot", cluster)
	}
	data, err := s.codec.encode(snap)
	if err != nil {
		return nil, fmt.Errorf("redis: put input %q: %w", cluster, err)
	}
	h := snap.Hash()
	e := store.Event{Kind: store.EventInput, Cluster: cluster, Version: snap.Version()}
	ev := s.message(e)
	withDelta, baseVersion, baseHash := "", "", []byte(nil)
	if base != nil && base.Version() < snap.Version() {
		if d := snapshot.Diff(base, snap); d.Size() <= maxEventDelta {
			bh := base.Hash()
			e.Delta = &store.InputDelta{BaseHash: bh, Delta: d}
			withDelta, baseVersion, baseHash = s.message(e), versionField(base.Version()), bh[:]
		}
	}
	return []any{versionField(snap.Version()), h[:], data, s.replica, s.keys.events(), ev, cluster, withDelta, baseVersion, baseHash}, nil
}

// GetInput implements store.Inputs.
func (s *Store) GetInput(ctx context.Context, cluster string) (*snapshot.Snapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	vals, err := s.client.HMGet(ctx, s.keys.input(cluster), "v", "h", "d").Result()
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("get input %q", cluster), err)
	}
	snap, err := s.decodeFields(vals[0], vals[1], vals[2])
	if err != nil {
		return nil, fmt.Errorf("redis: get input %q: %w", cluster, err)
	}
	return snap, nil
}

// decodeFields decodes a snapshot from its version, hash and data fields as
// HMGET returns them; a missing field is store.ErrNotFound.
func (s *Store) decodeFields(v, h, d any) (*snapshot.Snapshot, error) {
	vs, ok1 := v.(string)
	hs, ok2 := h.(string)
	ds, ok3 := d.(string)
	if !ok1 || !ok2 || !ok3 {
		return nil, store.ErrNotFound
	}
	return s.codec.decode(ds, vs, hs)
}

// ListInputs implements store.Inputs. It reads every input in one
// pipeline (ListEncodedInputs) and decodes them in parallel.
func (s *Store) ListInputs(ctx context.Context) (map[string]*snapshot.Snapshot, error) {
	all, err := s.ListEncodedInputs(ctx)
	if err != nil {
		return nil, err
	}
	names := slices.Collect(maps.Keys(all))
	snaps := make([]*snapshot.Snapshot, len(names))
	errs := make([]error, len(names))
	parallel(len(names), func(i int) {
		snaps[i], errs[i] = all[names[i]].Snapshot()
	})
	out := make(map[string]*snapshot.Snapshot, len(names))
	for i, name := range names {
		if errs[i] != nil {
			return nil, fmt.Errorf("list inputs: %q: %w", name, errs[i])
		}
		out[name] = snaps[i]
	}
	return out, nil
}

// ListEncodedInputs implements store.EncodedInputs. It reads the index and
// fetches every input in one pipeline; each is decoded when first asked
// for its snapshot, and one whose data is damaged is that input's error
// then. A version or hash that cannot be parsed is an error now.
func (s *Store) ListEncodedInputs(ctx context.Context) (map[string]*store.Encoded, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	names, err := s.client.SMembers(ctx, s.keys.inputs()).Result()
	if err != nil {
		return nil, s.wrap("list inputs", err)
	}
	cmds := make([]*goredis.SliceCmd, len(names))
	_, err = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.HMGet(ctx, s.keys.input(name), "v", "h", "d")
		}
		return nil
	})
	if err != nil {
		return nil, s.wrap("list inputs", err)
	}
	out := make(map[string]*store.Encoded, len(names))
	for i, name := range names {
		vals := cmds[i].Val()
		vs, ok1 := vals[0].(string)
		hs, ok2 := vals[1].(string)
		ds, ok3 := vals[2].(string)
		if !ok1 || !ok2 || !ok3 {
			continue // an index entry whose input is being written or was deleted
		}
		e, err := s.encoded(vs, hs, ds)
		if err != nil {
			return nil, fmt.Errorf("redis: list inputs: %q: %w", name, err)
		}
		out[name] = e
	}
	return out, nil
}

// parallel calls f(0..n-1) on up to GOMAXPROCS goroutines.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				f(i)
			}
		})
	}
	wg.Wait()
}

// DeleteInput implements store.Inputs.
func (s *Store) DeleteInput(ctx context.Context, cluster string) error {
	if err := s.check(); err != nil {
		return err
	}
	ev := s.message(store.Event{Kind: store.EventInput, Cluster: cluster, Deleted: true})
	if err := s.scripts.deleteKey.Run(ctx, s.client, []string{s.keys.input(cluster)}, s.keys.events(), ev).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete input %q", cluster), err)
	}
	if err := s.client.SRem(ctx, s.keys.inputs(), cluster).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete input %q", cluster), err)
	}
	return nil
}
