package memory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshrelay/meshrelay/core/store"
)

// AcquireLease implements store.Leases. Handles on the same data (see
// Replica) contend for the same leases.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := s.check(ctx); err != nil {
		return store.Lease{}, err
	}
	if err := checkLease(name, holder, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	cur := d.leases[name]
	if cur.Holder != "" && cur.Holder != holder && now.Before(cur.Expires) {
		return cur, nil
	}
	if d.leases == nil {
		d.leases = map[string]store.Lease{}
	}
	l := store.Lease{Holder: holder, Expires: now.Add(ttl)}
	d.leases[name] = l
	return l, nil
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.leases[name].Holder == holder {
		delete(d.leases, name)
	}
	return nil
}

// checkLease checks AcquireLease's arguments.
func checkLease(name, holder string, ttl time.Duration) error {
	switch {
	case name == "" || holder == "":
		return errors.New("empty lease name or holder")
	case ttl < time.Millisecond:
		return fmt.Errorf("lease %q: ttl %s is shorter than a millisecond", name, ttl)
	}
	return nil
}

// presence is a replica's last announcement.
type presence struct {
	store.Replica
	expires time.Time
}

// Announce implements store.Presence. Handles on the same data see each
// other's announcements.
func (s *Store) Announce(ctx context.Context, replica string, r store.Replica, ttl time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := store.CheckAnnounce(replica, r, ttl); err != nil {
		return fmt.Errorf("announce: %w", err)
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.presence == nil {
		d.presence = map[string]presence{}
	}
	d.presence[replica] = presence{Replica: r, expires: time.Now().Add(ttl)}
	return nil
}

// Replicas implements store.Presence.
func (s *Store) Replicas(ctx context.Context) (map[string]store.Replica, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	out := make(map[string]store.Replica, len(d.presence))
	for r, p := range d.presence {
		if now.Before(p.expires) {
			out[r] = p.Replica
		} else {
			delete(d.presence, r)
		}
	}
	return out, nil
}
