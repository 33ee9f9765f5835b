package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/core/store"
)

// PutCA implements store.CA.
func (s *Store) PutCA(ctx context.Context, certPEM, keyPEM []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return errors.New("redis: put ca: empty certificate or key")
	}
	if err := s.client.HSet(ctx, s.keys.ca(), "cert", certPEM, "key", keyPEM).Err(); err != nil {
		return s.wrap("put ca", err)
	}
	return nil
}

// GetCA implements store.CA.
func (s *Store) GetCA(ctx context.Context) (certPEM, keyPEM []byte, err error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	vals, err := s.client.HMGet(ctx, s.keys.ca(), "cert", "key").Result()
	if err != nil {
		return nil, nil, s.wrap("get ca", err)
	}
	cert, ok1 := vals[0].(string)
	key, ok2 := vals[1].(string)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("redis: get ca: %w", store.ErrNotFound)
	}
	return []byte(cert), []byte(key), nil
}

// PutTrust implements store.Trust.
func (s *Store) PutTrust(ctx context.Context, name string, data []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	if name == "" || len(data) == 0 {
		return errors.New("redis: put trust: empty name or data")
	}
	if err := s.client.HSet(ctx, s.keys.trust(), name, data).Err(); err != nil {
		return s.wrap(fmt.Sprintf("put trust %q", name), err)
	}
	return nil
}

// GetTrust implements store.Trust.
func (s *Store) GetTrust(ctx context.Context, name string) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	data, err := s.client.HGet(ctx, s.keys.trust(), name).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("redis: get trust %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("get trust %q", name), err)
	}
	return data, nil
}
