package testutil

import (
	"testing"
	"time"
)

// Timeout is how long a wait lasts before it fails the test.
const Timeout = 60 * time.Second

// PollInterval is how long Eventually first waits between looks at its
// condition; the wait grows by half each look up to MaxPollInterval, so a
// quick condition is seen at once and a slow one (a call to an API
// server) does not load the machine.
const (
	PollInterval    = 10 * time.Millisecond
	MaxPollInterval = 50 * time.Millisecond
)

// Eventually polls cond until it holds, failing the test after [Timeout]
// with what it waited for.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWhy(t, what, func() (bool, string) { return cond(), "" })
}

// EventuallyWhy polls cond until it holds, failing the test after
// [Timeout] with what it waited for and the last reason cond gave.
func EventuallyWhy(t testing.TB, what string, cond func() (ok bool, why string)) {
	t.Helper()
	eventually(t, Timeout, what, cond)
}

// EventuallyWithin is EventuallyWhy with its own timeout, for a wait
// known to be long (a fleet of a thousand clusters translated under the
// race detector).
func EventuallyWithin(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	eventually(t, timeout, what, cond)
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	interval := PollInterval
	tick := time.NewTimer(interval)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		select {
		case <-tick.C:
			interval = min(interval*3/2, MaxPollInterval)
			tick.Reset(interval)
		case <-deadline.C:
			if why != "" {
				why = ": " + why
			}
			t.Fatalf("%s: not within %v%s", what, timeout, why)
		}
	}
}

// Receive waits for a value on ch (or for ch to close, giving the zero
// value), failing the test after [Timeout].
func Receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	select {
	case v := <-ch:
		return v
	case <-deadline.C:
		t.Fatalf("%s: not within %v", what, Timeout)
		var zero T
		return zero
	}
}
