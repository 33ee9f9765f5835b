package storetest

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/store"
)

// leaseTests are the cases of the store.Leases and store.Presence
// contracts.
var leaseTests = map[string]func(t *testing.T, newStore Factory){
	"LeaseAcquireRenew":     testLeaseAcquireRenew,
	"LeaseRelease":          testLeaseRelease,
	"LeaseExpires":          testLeaseExpires,
	"LeaseRace":             testLeaseRace,
	"LeaseInvalidArguments": testLeaseInvalidArguments,
	"LeaseClosed":           testLeaseClosed,
	"PresenceAnnounce":      testPresenceAnnounce,
	"PresenceExpires":       testPresenceExpires,
	"PresenceInvalid":       testPresenceInvalidArguments,
}

// acquire calls AcquireLease and fails the test on an error.
func acquire(t *testing.T, s store.Store, name, holder string, ttl time.Duration) store.Lease {
	t.Helper()
	l, err := s.AcquireLease(ctxFor(t), name, holder, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%q, %q): %v", name, holder, err)
	}
	return l
}

// A free lease goes to the first replica that asks; another replica gets
// the holder's lease back unchanged until it expires, and the holder
// renews it.
func testLeaseAcquireRenew(t *testing.T, newStore Factory) {
	a, b := newStore(t), newStore(t)
	before := time.Now()
	got := acquire(t, a, "job", "h1", time.Minute)
	if got.Holder != "h1" || got.Expires.Before(before.Add(time.Minute-time.Second)) || got.Expires.After(time.Now().Add(time.Minute)) {
		t.Fatalf("AcquireLease of a free lease = %+v, want h1's for a minute from now", got)
	}
	if other := acquire(t, b, "job", "h2", time.Minute); other.Holder != "h1" {
		t.Fatalf("AcquireLease by h2 while h1 holds it = %+v, want h1 to hold it", other)
	}
	if other := acquire(t, a, "other-job", "h2", time.Minute); other.Holder != "h2" {
		t.Fatalf("AcquireLease of another lease = %+v, want h2 to hold it", other)
	}
	renewed := acquire(t, b, "job", "h1", 2*time.Minute)
	if renewed.Holder != "h1" || !renewed.Expires.After(got.Expires) {
		t.Fatalf("renewal by h1 for 2 minutes = %+v, want h1's expiring after %v", renewed, got.Expires)
	}
}

// Releasing hands the lease on at once; only the holder can release it.
func testLeaseRelease(t *testing.T, newStore Factory) {
	a, b := newStore(t), newStore(t)
	acquire(t, a, "job", "h1", time.Minute)
	must(t, "ReleaseLease by a non-holder", b.ReleaseLease(ctxFor(t), "job", "h2"))
	if got := acquire(t, b, "job", "h2", time.Minute); got.Holder != "h1" {
		t.Fatalf("AcquireLease after a non-holder's release = %+v, want h1 to hold it still", got)
	}
	must(t, "ReleaseLease", a.ReleaseLease(ctxFor(t), "job", "h1"))
	if got := acquire(t, b, "job", "h2", time.Minute); got.Holder != "h2" {
		t.Fatalf("AcquireLease after the holder's release = %+v, want h2 to hold it", got)
	}
	must(t, "ReleaseLease of a free lease", a.ReleaseLease(ctxFor(t), "free", "h1"))
}

// A lease its holder stops renewing goes to another replica once its time
// ran out.
func testLeaseExpires(t *testing.T, newStore Factory) {
	a, b := newStore(t), newStore(t)
	first := acquire(t, a, "job", "h1", 100*time.Millisecond)
	if first.Holder != "h1" {
		t.Fatalf("AcquireLease of a free lease = %+v", first)
	}
	deadline := time.Now().Add(eventTimeout)
	for {
		got := acquire(t, b, "job", "h2", time.Minute)
		if got.Holder == "h2" {
			if now := time.Now(); now.Before(first.Expires) {
				t.Fatalf("h2 took the lease at %v, before h1's expired at %v", now, first.Expires)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("h1's lease of 100ms still held after %v: %+v", eventTimeout, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Replicas racing for a free lease agree on one holder.
func testLeaseRace(t *testing.T, newStore Factory) {
	const n = 8
	stores := make([]store.Store, n)
	for i := range stores {
		stores[i] = newStore(t)
	}
	got := make([]store.Lease, n)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			l, err := s.AcquireLease(ctxFor(t), "job", fmt.Sprintf("h%d", i), time.Minute)
			if err != nil {
				t.Errorf("AcquireLease by h%d: %v", i, err)
			}
			got[i] = l
		})
	}
	wg.Wait()
	winner := got[0].Holder
	for _, l := range got {
		if l.Holder != winner || l.Holder == "" {
			t.Fatalf("racing replicas were told the holders %v, want one", got)
		}
	}
}

func testLeaseInvalidArguments(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	for _, c := range []struct {
		name, holder string
		ttl          time.Duration
	}{{"", "h1", time.Minute}, {"job", "", time.Minute}, {"job", "h1", 0}} {
		if _, err := s.AcquireLease(ctx, c.name, c.holder, c.ttl); err == nil {
			t.Errorf("AcquireLease(%q, %q, %v) succeeded, want an error", c.name, c.holder, c.ttl)
		}
	}
}

func testLeaseClosed(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	must(t, "Close", s.Close())
	if _, err := s.AcquireLease(ctx, "job", "h1", time.Minute); !errors.Is(err, store.ErrClosed) {
		t.Errorf("AcquireLease after Close: err = %v, want ErrClosed", err)
	}
	if err := s.ReleaseLease(ctx, "job", "h1"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("ReleaseLease after Close: err = %v, want ErrClosed", err)
	}
}

// Every replica sees every replica's latest announcement, its address
// with it: kept, replaced and taken back.
func testPresenceAnnounce(t *testing.T, newStore Factory) {
	a, b := newStore(t), newStore(t)
	ctx := ctxFor(t)
	must(t, "Announce r1", a.Announce(ctx, "r1", store.Replica{Agents: 7, Address: "10.0.0.1:9900"}, time.Minute))
	must(t, "Announce r2", b.Announce(ctx, "r2", store.Replica{Address: "10.0.0.2:9900"}, time.Minute))
	must(t, "Announce r3", b.Announce(ctx, "r3", store.Replica{Agents: 1, Address: "10.0.0.3:9900"}, time.Minute))
	must(t, "Announce r1 again", a.Announce(ctx, "r1", store.Replica{Agents: 3, Address: "10.0.0.9:9900"}, time.Minute))
	must(t, "Announce r3 without an address", b.Announce(ctx, "r3", store.Replica{Agents: 2}, time.Minute))
	want := map[string]store.Replica{
		"r1": {Agents: 3, Address: "10.0.0.9:9900"},
		"r2": {Address: "10.0.0.2:9900"},
		"r3": {Agents: 2},
	}
	for _, s := range []store.Store{a, b} {
		got, err := s.Replicas(ctx)
		must(t, "Replicas", err)
		if !maps.Equal(got, want) {
			t.Errorf("Replicas = %v, want %v", got, want)
		}
	}
}

// A replica that stops announcing drops out once its time ran out; the
// others stay.
func testPresenceExpires(t *testing.T, newStore Factory) {
	a, b := newStore(t), newStore(t)
	ctx := ctxFor(t)
	must(t, "Announce r1", a.Announce(ctx, "r1", store.Replica{Agents: 1, Address: "r1:9900"}, 100*time.Millisecond))
	must(t, "Announce r2", b.Announce(ctx, "r2", store.Replica{Agents: 2}, time.Minute))
	deadline := time.Now().Add(eventTimeout)
	for {
		got, err := b.Replicas(ctx)
		must(t, "Replicas", err)
		if maps.Equal(got, map[string]store.Replica{"r2": {Agents: 2}}) {
			return
		}
		if _, ok := got["r2"]; !ok || time.Now().After(deadline) {
			t.Fatalf("Replicas = %v, want r2 alone once r1's 100ms ran out", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testPresenceInvalidArguments(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	for _, c := range []struct {
		replica string
		r       store.Replica
		ttl     time.Duration
	}{
		{"", store.Replica{Agents: 1}, time.Minute},
		{"r1", store.Replica{Agents: -1}, time.Minute},
		{"r1", store.Replica{Agents: 1}, 0},
		{"r1", store.Replica{Address: strings.Repeat("a", 513)}, time.Minute},
	} {
		if err := s.Announce(ctx, c.replica, c.r, c.ttl); err == nil {
			t.Errorf("Announce(%q, %+v, %v) succeeded, want an error", c.replica, c.r, c.ttl)
		}
	}
	must(t, "Close", s.Close())
	if err := s.Announce(ctx, "r1", store.Replica{Agents: 1}, time.Minute); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Announce after Close: err = %v, want ErrClosed", err)
	}
	if _, err := s.Replicas(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Replicas after Close: err = %v, want ErrClosed", err)
	}
}
