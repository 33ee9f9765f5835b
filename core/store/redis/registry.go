package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/core/store"
)

// clusterRecord is a registry record's stored JSON.
type clusterRecord struct {
	Name          string    `json:"name"`
	TokenHash     []byte    `json:"tokenHash,omitempty"`
	TokenExpires  time.Time `json:"tokenExpires"`
	Registered    time.Time `json:"registered"`
	Serials       []string  `json:"serials,omitempty"`
	CertExpires   time.Time `json:"certExpires"`
	Revoked       bool      `json:"revoked,omitempty"`
	RevokedAt     time.Time `json:"revokedAt"`
	LastSeen      time.Time `json:"lastSeen"`
	Replica       string    `json:"replica,omitempty"`
	TokenReusable bool      `json:"tokenReusable,omitempty"`
	SharedToken   bool      `json:"sharedToken,omitempty"`
	// The shared token's last registration of the cluster.
	SharedRegistered     time.Time         `json:"sharedRegistered"`
	SharedRegisteredFrom string            `json:"sharedRegisteredFrom,omitempty"`
	Labels               map[string]string `json:"labels,omitempty"`
	Version              uint64            `json:"version,omitempty"`
}

// PutCluster implements store.Registry.
func (s *Store) PutCluster(ctx context.Context, c store.Cluster) error {
	if err := s.check(); err != nil {
		return err
	}
	args, err := s.putClusterArgs(c)
	if err != nil {
		return err
	}
	if err := s.scripts.putField.Run(ctx, s.client, []string{s.keys.clusters()}, args...).Err(); err != nil {
		return s.wrap(fmt.Sprintf("put cluster %q", c.Name), err)
	}
	return nil
}

// putClusterArgs checks a PutCluster and returns its script's arguments.
func (s *Store) putClusterArgs(c store.Cluster) ([]any, error) {
	if c.Name == "" {
		return nil, errors.New("redis: put cluster: empty cluster name")
	}
	b, err := json.Marshal(clusterRecord(c))
	if err != nil {
		return nil, fmt.Errorf("redis: put cluster %q: %w", c.Name, err)
	}
	ev := s.message(store.Event{Kind: store.EventCluster, Cluster: c.Name})
	return []any{c.Name, b, s.keys.events(), ev}, nil
}

// CompareAndPutCluster implements store.Registry: the version check and the
// write are one Lua script.
func (s *Store) CompareAndPutCluster(ctx context.Context, c store.Cluster) (store.Cluster, error) {
	if err := s.check(); err != nil {
		return store.Cluster{}, err
	}
	if c.Name == "" {
		return store.Cluster{}, errors.New("redis: put cluster: empty cluster name")
	}
	next := c.Clone()
	next.Version = c.Version + 1
	b, err := json.Marshal(clusterRecord(next))
	if err != nil {
		return store.Cluster{}, fmt.Errorf("redis: put cluster %q: %w", c.Name, err)
	}
	ev := s.message(store.Event{Kind: store.EventCluster, Cluster: c.Name})
	n, err := s.scripts.casCluster.Run(ctx, s.client, []string{s.keys.clusters()},
		c.Name, strconv.FormatUint(c.Version, 10), b, s.keys.events(), ev).Int()
	if err != nil {
		return store.Cluster{}, s.wrap(fmt.Sprintf("put cluster %q", c.Name), err)
	}
	if n == 0 {
		return store.Cluster{}, fmt.Errorf("redis: put cluster %q at version %d: %w", c.Name, c.Version, store.ErrConflict)
	}
	return next, nil
}

// clusterBatch bounds the records one script of CompareAndPutClusters
// checks and writes, so that Redis, which runs a script alone, is not held
// for long.
const clusterBatch = 500

// CompareAndPutClusters implements store.Registry: one Lua script checks
// and writes up to clusterBatch records.
func (s *Store) CompareAndPutClusters(ctx context.Context, cs []store.Cluster) ([]store.Cluster, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	stored := make([]store.Cluster, 0, len(cs))
	for batch := range slices.Chunk(cs, clusterBatch) {
		next := make([]store.Cluster, len(batch))
		args := make([]any, 0, 1+4*len(batch))
		args = append(args, s.keys.events())
		for i, c := range batch {
			if c.Name == "" {
				return nil, errors.New("redis: put clusters: empty cluster name")
			}
			next[i] = c.Clone()
			next[i].Version = c.Version + 1
			b, err := json.Marshal(clusterRecord(next[i]))
			if err != nil {
				return nil, fmt.Errorf("redis: put cluster %q: %w", c.Name, err)
			}
			args = append(args, c.Name, strconv.FormatUint(c.Version, 10), b, s.message(store.Event{Kind: store.EventCluster, Cluster: c.Name}))
		}
		done, err := s.scripts.casClusters.Run(ctx, s.client, []string{s.keys.clusters()}, args...).Int64Slice()
		if err != nil {
			return nil, s.wrap(fmt.Sprintf("put %d clusters", len(batch)), err)
		}
		for i, ok := range done {
			if ok == 1 && i < len(next) {
				stored = append(stored, next[i])
			}
		}
	}
	return stored, nil
}

func decodeCluster(name, data string) (store.Cluster, error) {
	var r clusterRecord
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		return store.Cluster{}, fmt.Errorf("decode cluster %q: %w", name, err)
	}
	return store.Cluster(r), nil
}

// GetCluster implements store.Registry.
func (s *Store) GetCluster(ctx context.Context, name string) (store.Cluster, error) {
	if err := s.check(); err != nil {
		return store.Cluster{}, err
	}
	data, err := s.client.HGet(ctx, s.keys.clusters(), name).Result()
	if errors.Is(err, goredis.Nil) {
		return store.Cluster{}, fmt.Errorf("redis: get cluster %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Cluster{}, s.wrap(fmt.Sprintf("get cluster %q", name), err)
	}
	c, err := decodeCluster(name, data)
	if err != nil {
		return store.Cluster{}, fmt.Errorf("redis: get cluster: %w", err)
	}
	return c, nil
}

// GetClusters returns the registry records of names that are stored, by
// name, read with one HMGET: store.WriteThrough follows another replica's
// heartbeat, which touches every record it serves at once, so. A record
// that cannot be decoded fails the whole read.
func (s *Store) GetClusters(ctx context.Context, names []string) (map[string]store.Cluster, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make(map[string]store.Cluster, len(names))
	if len(names) == 0 {
		return out, nil
	}
	vals, err := s.client.HMGet(ctx, s.keys.clusters(), names...).Result()
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("get %d clusters", len(names)), err)
	}
	for i, v := range vals {
		data, ok := v.(string)
		if !ok {
			continue // not stored
		}
		c, err := decodeCluster(names[i], data)
		if err != nil {
			return nil, fmt.Errorf("redis: get clusters: %w", err)
		}
		out[names[i]] = c
	}
	return out, nil
}

// ListClusters implements store.Registry.
func (s *Store) ListClusters(ctx context.Context) ([]store.Cluster, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	all, err := s.client.HGetAll(ctx, s.keys.clusters()).Result()
	if err != nil {
		return nil, s.wrap("list clusters", err)
	}
	out := make([]store.Cluster, 0, len(all))
	for name, data := range all {
		c, err := decodeCluster(name, data)
		if err != nil {
			return nil, fmt.Errorf("redis: list clusters: %w", err)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b store.Cluster) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteCluster implements store.Registry.
func (s *Store) DeleteCluster(ctx context.Context, name string) error {
	if err := s.check(); err != nil {
		return err
	}
	ev := s.message(store.Event{Kind: store.EventCluster, Cluster: name, Deleted: true})
	if err := s.scripts.deleteField.Run(ctx, s.client, []string{s.keys.clusters()}, name, s.keys.events(), ev).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete cluster %q", name), err)
	}
	return nil
}
