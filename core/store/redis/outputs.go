package redis

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
)

// PutOutput implements store.Outputs.
func (s *Store) PutOutput(ctx context.Context, cluster, backend string, snap *snapshot.Snapshot) error {
	_, err := s.putOutput(ctx, cluster, backend, snap, false)
	return err
}

// PutOutputUnlessRevoked is PutOutput unless the cluster's registry record
// is revoked, checked in the same atomic step as the write, as
// PutInputUnlessRevoked does.
func (s *Store) PutOutputUnlessRevoked(ctx context.Context, cluster, backend string, snap *snapshot.Snapshot) (revoked bool, err error) {
	return s.putOutput(ctx, cluster, backend, snap, true)
}

// putOutput writes an output, checking the cluster's registry record in
// the script when unlessRevoked.
func (s *Store) putOutput(ctx context.Context, cluster, backend string, snap *snapshot.Snapshot, unlessRevoked bool) (revoked bool, err error) {
	if err := s.check(); err != nil {
		return false, err
	}
	args, err := s.putOutputArgs(cluster, backend, snap)
	if err != nil {
		return false, err
	}
	keys := []string{s.keys.output(cluster)}
	if unlessRevoked {
		keys, args = append(keys, s.keys.clusters()), append(args, cluster)
	}
	n, err := s.scripts.putOutput.Run(ctx, s.client, keys, args...).Int()
	if err != nil {
		return false, s.wrap(fmt.Sprintf("put output %q/%q", cluster, backend), err)
	}
	return n < 0, nil
}

// putOutputArgs checks a PutOutput and returns its script's arguments.
func (s *Store) putOutputArgs(cluster, backend string, snap *snapshot.Snapshot) ([]any, error) {
	if cluster == "" || backend == "" {
		return nil, fmt.Errorf("redis: put output %q/%q: empty cluster or backend name", cluster, backend)
	}
	if snap == nil {
		return nil, fmt.Errorf("redis: put output %q/%q: nil snapshot", cluster, backend)
	}
	data, err := s.codec.encode(snap)
	if err != nil {
		return nil, fmt.Errorf("redis: put output %q/%q: %w", cluster, backend, err)
	}
	h := snap.Hash()
	ev := s.message(store.Event{Kind: store.EventOutput, Cluster: cluster, Backend: backend, Version: snap.Version()})
	return []any{versionField(snap.Version()), h[:], data, s.replica, s.keys.events(), ev, backend}, nil
}

// GetOutput implements store.Outputs.
func (s *Store) GetOutput(ctx context.Context, cluster, backend string) (*snapshot.Snapshot, error) {
	e, err := s.GetEncodedOutput(ctx, cluster, backend)
	if err != nil {
		return nil, err
	}
	snap, err := e.Snapshot()
	if err != nil {
		// The error says "redis:" already (encoded).
		return nil, fmt.Errorf("get output %q/%q: %w", cluster, backend, err)
	}
	return snap, nil
}

// GetEncodedOutput is GetOutput without decoding: the output's version and
// hash, and its data decoded and checked against them when its Snapshot is
// first asked for (store.Encoded). store.WriteThrough copies the outputs
// other replicas write so: a replica reads them only when an agent moves
// to it or a reader asks.
func (s *Store) GetEncodedOutput(ctx context.Context, cluster, backend string) (*store.Encoded, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	vals, err := s.client.HMGet(ctx, s.keys.output(cluster), "v:"+backend, "h:"+backend, "d:"+backend).Result()
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("get output %q/%q", cluster, backend), err)
	}
	vs, ok1 := vals[0].(string)
	hs, ok2 := vals[1].(string)
	ds, ok3 := vals[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("redis: get output %q/%q: %w", cluster, backend, store.ErrNotFound)
	}
	e, err := s.encoded(vs, hs, ds)
	if err != nil {
		return nil, fmt.Errorf("redis: get output %q/%q: %w", cluster, backend, err)
	}
	return e, nil
}

// encoded returns the store.Encoded of a snapshot stored as data beside
// its version and hash; an error when the version or hash cannot be
// parsed. The data is decoded when first asked for.
func (s *Store) encoded(version, hash, data string) (*store.Encoded, error) {
	v, h, err := storedHead(version, hash)
	if err != nil {
		return nil, err
	}
	return store.NewEncoded(v, h, func() (*snapshot.Snapshot, error) {
		snap, err := s.codec.decode(data, version, hash)
		if err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		return snap, nil
	}), nil
}

// ListOutputs implements store.Outputs.
func (s *Store) ListOutputs(ctx context.Context, cluster string) (map[string]*snapshot.Snapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	fields, err := s.client.HGetAll(ctx, s.keys.output(cluster)).Result()
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("list outputs %q", cluster), err)
	}
	out := make(map[string]*snapshot.Snapshot)
	for f, v := range fields {
		backend, ok := strings.CutPrefix(f, "v:")
		if !ok {
			continue
		}
		snap, err := s.decodeFields(v, fields["h:"+backend], fields["d:"+backend])
		if err != nil {
			return nil, fmt.Errorf("redis: list outputs %q: %q: %w", cluster, backend, err)
		}
		out[backend] = snap
	}
	return out, nil
}

// DeleteOutputs implements store.Outputs.
func (s *Store) DeleteOutputs(ctx context.Context, cluster string) error {
	if err := s.check(); err != nil {
		return err
	}
	ev := s.message(store.Event{Kind: store.EventOutput, Cluster: cluster, Deleted: true})
	if err := s.scripts.deleteKey.Run(ctx, s.client, []string{s.keys.output(cluster)}, s.keys.events(), ev).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete outputs %q", cluster), err)
	}
	return nil
}

// ListOutputsOf returns the outputs of each of clusters, by cluster and
// backend, as ListOutputs would one cluster at a time (a cluster without
// outputs maps to an empty map), but kept encoded: each output's version
// and hash are read, its data is decoded and checked against them when
// its Snapshot is first asked for (store.Encoded). It reads them in one
// pipeline, so that a cold start of many clusters waits neither for a
// round trip per cluster nor for decoding outputs no one reads yet
// (store.WriteThrough's Load uses it).
func (s *Store) ListOutputsOf(ctx context.Context, clusters []string) (map[string]map[string]*store.Encoded, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	cmds := make([]*goredis.MapStringStringCmd, len(clusters))
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, name := range clusters {
			cmds[i] = p.HGetAll(ctx, s.keys.output(name))
		}
		return nil
	})
	if err != nil {
		return nil, s.wrap("list outputs", err)
	}
	out := make(map[string]map[string]*store.Encoded, len(clusters))
	for i, name := range clusters {
		fields := cmds[i].Val()
		byBackend := map[string]*store.Encoded{}
		for f, vs := range fields {
			backend, ok := strings.CutPrefix(f, "v:")
			if !ok {
				continue
			}
			hs, ok1 := fields["h:"+backend]
			ds, ok2 := fields["d:"+backend]
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("redis: list outputs %q: %q: %w", name, backend, store.ErrNotFound)
			}
			// Its reader names the output (memory.Store.GetOutput).
			e, err := s.encoded(vs, hs, ds)
			if err != nil {
				return nil, fmt.Errorf("redis: list outputs %q: %q: %w", name, backend, err)
			}
			byBackend[backend] = e
		}
		out[name] = byBackend
	}
	return out, nil
}
