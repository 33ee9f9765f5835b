package testutil

import (
	"testing"
	"time"
)

// Timeout is how long a wait lasts before it fails the test.
const Timeout = 60 * time.Second

// PollInterval is how often Eventually looks at its condition.
const PollInterval = 10 * time.Millisecond

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

func eventually(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		select {
		case <-tick.C:
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
