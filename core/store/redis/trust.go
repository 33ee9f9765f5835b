package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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

// A trust record is one field of the trust hash: its version, 20
// zero-padded digits, a colon, then its data. A value without the prefix
// was written before records had versions and counts as version 0.
const trustVersionDigits = 20

func encodeTrust(version uint64, data []byte) []byte {
	out := make([]byte, 0, trustVersionDigits+1+len(data))
	out = fmt.Appendf(out, "%0*d:", trustVersionDigits, version)
	return append(out, data...)
}

func decodeTrust(name string, value []byte) store.TrustRecord {
	r := store.TrustRecord{Name: name, Data: value}
	if len(value) <= trustVersionDigits || value[trustVersionDigits] != ':' {
		return r
	}
	v, err := strconv.ParseUint(string(value[:trustVersionDigits]), 10, 64)
	if err != nil {
		return r
	}
	r.Data, r.Version = value[trustVersionDigits+1:], v
	return r
}

// GetTrust implements store.Trust.
func (s *Store) GetTrust(ctx context.Context, name string) (store.TrustRecord, error) {
	if err := s.check(); err != nil {
		return store.TrustRecord{}, err
	}
	value, err := s.client.HGet(ctx, s.keys.trust(), name).Bytes()
	if errors.Is(err, goredis.Nil) {
		return store.TrustRecord{}, fmt.Errorf("redis: get trust %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.TrustRecord{}, s.wrap(fmt.Sprintf("get trust %q", name), err)
	}
	return decodeTrust(name, value), nil
}

// PutTrust implements store.Trust.
func (s *Store) PutTrust(ctx context.Context, r store.TrustRecord) error {
	if err := s.check(); err != nil {
		return err
	}
	if r.Name == "" || len(r.Data) == 0 {
		return errors.New("redis: put trust: empty name or data")
	}
	if err := s.client.HSet(ctx, s.keys.trust(), r.Name, encodeTrust(r.Version, r.Data)).Err(); err != nil {
		return s.wrap(fmt.Sprintf("put trust %q", r.Name), err)
	}
	return nil
}

// CompareAndPutTrust implements store.Trust: the version check and the
// write are one Lua script.
func (s *Store) CompareAndPutTrust(ctx context.Context, r store.TrustRecord) (store.TrustRecord, error) {
	if err := s.check(); err != nil {
		return store.TrustRecord{}, err
	}
	if r.Name == "" || len(r.Data) == 0 {
		return store.TrustRecord{}, errors.New("redis: put trust: empty name or data")
	}
	next := r.Clone()
	next.Version = r.Version + 1
	n, err := s.scripts.casTrust.Run(ctx, s.client, []string{s.keys.trust()},
		r.Name, fmt.Sprintf("%0*d", trustVersionDigits, r.Version), encodeTrust(next.Version, next.Data)).Int()
	if err != nil {
		return store.TrustRecord{}, s.wrap(fmt.Sprintf("put trust %q", r.Name), err)
	}
	if n == 0 {
		return store.TrustRecord{}, fmt.Errorf("redis: put trust %q at version %d: %w", r.Name, r.Version, store.ErrConflict)
	}
	return next, nil
}

// DeleteTrust implements store.Trust.
func (s *Store) DeleteTrust(ctx context.Context, name string) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.client.HDel(ctx, s.keys.trust(), name).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete trust %q", name), err)
	}
	return nil
}

// casTrustScriptSrc stores a trust record only if the stored one's version
// is ARGV[2] (20 digits; all zeros when none is stored, or when the stored
// value predates versions).
const casTrustScriptSrc = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local v = '00000000000000000000'
if cur and string.sub(cur, 21, 21) == ':' and string.match(string.sub(cur, 1, 20), '^%d+$') then v = string.sub(cur, 1, 20) end
if v ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
`
