package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/core/store"
)

// A rollout record is one field of the rollouts hash, encoded as a trust
// record is (encodeTrust) and checked by the same script.

// GetRollout implements store.Rollouts.
func (s *Store) GetRollout(ctx context.Context, name string) (store.RolloutRecord, error) {
	if err := s.check(); err != nil {
		return store.RolloutRecord{}, err
	}
	value, err := s.client.HGet(ctx, s.keys.rollouts(), name).Bytes()
	if errors.Is(err, goredis.Nil) {
		return store.RolloutRecord{}, fmt.Errorf("redis: get rollout %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.RolloutRecord{}, s.wrap(fmt.Sprintf("get rollout %q", name), err)
	}
	r := decodeTrust(name, value)
	return store.RolloutRecord{Name: r.Name, Data: r.Data, Version: r.Version}, nil
}

// CompareAndPutRollout implements store.Rollouts: the version check and
// the write are one Lua script.
func (s *Store) CompareAndPutRollout(ctx context.Context, r store.RolloutRecord) (store.RolloutRecord, error) {
	if err := s.check(); err != nil {
		return store.RolloutRecord{}, err
	}
	if r.Name == "" || len(r.Data) == 0 {
		return store.RolloutRecord{}, errors.New("redis: put rollout: empty name or data")
	}
	next := r.Clone()
	next.Version = r.Version + 1
	n, err := s.scripts.casTrust.Run(ctx, s.client, []string{s.keys.rollouts()},
		r.Name, fmt.Sprintf("%0*d", trustVersionDigits, r.Version), encodeTrust(next.Version, next.Data)).Int()
	if err != nil {
		return store.RolloutRecord{}, s.wrap(fmt.Sprintf("put rollout %q", r.Name), err)
	}
	if n == 0 {
		return store.RolloutRecord{}, fmt.Errorf("redis: put rollout %q at version %d: %w", r.Name, r.Version, store.ErrConflict)
	}
	return next, nil
}

// DeleteRollout implements store.Rollouts.
func (s *Store) DeleteRollout(ctx context.Context, name string) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.client.HDel(ctx, s.keys.rollouts(), name).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete rollout %q", name), err)
	}
	return nil
}
