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
	if err := s.check(); err != nil {
		return err
	}
	args, err := s.putOutputArgs(cluster, backend, snap)
	if err != nil {
		return err
	}
	if err := s.scripts.putOutput.Run(ctx, s.client, []string{s.keys.output(cluster)}, args...).Err(); err != nil {
		return s.wrap(fmt.Sprintf("put output %q/%q", cluster, backend), err)
	}
	return nil
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
	if err := s.check(); err != nil {
		return nil, err
	}
	vals, err := s.client.HMGet(ctx, s.keys.output(cluster), "v:"+backend, "h:"+backend, "d:"+backend).Result()
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("get output %q/%q", cluster, backend), err)
	}
	snap, err := s.decodeFields(vals[0], vals[1], vals[2])
	if err != nil {
		return nil, fmt.Errorf("redis: get output %q/%q: %w", cluster, backend, err)
	}
	return snap, nil
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
// backend, as ListOutputs would one cluster at a time: a cluster without
// outputs maps to an empty map. It reads them in one pipeline and decodes
// them in parallel, so that a cold start of many clusters does not wait
// for a round trip per cluster (store.WriteThrough's Load uses it).
func (s *Store) ListOutputsOf(ctx context.Context, clusters []string) (map[string]map[string]*snapshot.Snapshot, error) {
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
	type field struct {
		cluster int
		backend string
		snap    *snapshot.Snapshot
		err     error
	}
	var fields []field
	for i, cmd := range cmds {
		for f := range cmd.Val() {
			if backend, ok := strings.CutPrefix(f, "v:"); ok {
				fields = append(fields, field{cluster: i, backend: backend})
			}
		}
	}
	parallel(len(fields), func(i int) {
		f := &fields[i]
		all := cmds[f.cluster].Val()
		f.snap, f.err = s.decodeFields(all["v:"+f.backend], all["h:"+f.backend], all["d:"+f.backend])
	})
	out := make(map[string]map[string]*snapshot.Snapshot, len(clusters))
	for _, name := range clusters {
		out[name] = map[string]*snapshot.Snapshot{}
	}
	for _, f := range fields {
		if f.err != nil {
			return nil, fmt.Errorf("redis: list outputs %q: %q: %w", clusters[f.cluster], f.backend, f.err)
		}
		out[clusters[f.cluster]][f.backend] = f.snap
	}
	return out, nil
}
