package redis

import (
	"context"
	"fmt"
	"strings"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
)

// PutOutput implements store.Outputs.
func (s *Store) PutOutput(ctx context.Context, cluster, backend string, snap *snapshot.Snapshot) error {
	if err := s.check(); err != nil {
		return err
	}
	if cluster == "" || backend == "" {
		return fmt.Errorf("redis: put output %q/%q: empty cluster or backend name", cluster, backend)
	}
	if snap == nil {
		return fmt.Errorf("redis: put output %q/%q: nil snapshot", cluster, backend)
	}
	data, err := s.codec.encode(snap)
	if err != nil {
		return fmt.Errorf("redis: put output %q/%q: %w", cluster, backend, err)
	}
	h := snap.Hash()
	ev := s.message(store.Event{Kind: store.EventOutput, Cluster: cluster, Backend: backend, Version: snap.Version()})
	err = s.scripts.putOutput.Run(ctx, s.client, []string{s.keys.output(cluster)},
		versionField(snap.Version()), h[:], data, s.replica, s.keys.events(), ev, backend).Err()
	if err != nil {
		return s.wrap(fmt.Sprintf("put output %q/%q", cluster, backend), err)
	}
	return nil
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
