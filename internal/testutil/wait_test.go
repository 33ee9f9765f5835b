package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalT records a Fatalf and ends the goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a fatalT in a goroutine of its own and returns what
// it failed with ("" when it returned).
func run(fn func(t testing.TB)) string {
	f := &fatalT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	var n atomic.Int32
	msg := run(func(t testing.TB) {
		eventually(t, time.Minute, "three looks", func() (bool, string) { return n.Add(1) == 3, "" })
	})
	if msg != "" || n.Load() != 3 {
		t.Errorf("eventually() failed with %q after %d looks, want success at the third", msg, n.Load())
	}
}

func TestEventuallyFailsWithTheLastReason(t *testing.T) {
	var n atomic.Int32
	msg := run(func(t testing.TB) {
		eventually(t, 50*time.Millisecond, "never", func() (bool, string) { return false, fmt.Sprintf("look %d", n.Add(1)) })
	})
	if !strings.HasPrefix(msg, "never: not within 50ms: look ") || !strings.HasSuffix(msg, fmt.Sprint(n.Load())) {
		t.Errorf("eventually() failed with %q, want what it waited for and the last reason (look %d)", msg, n.Load())
	}
}

func TestReceive(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Receive(t, "a value", ch); got != 7 {
		t.Errorf("Receive() = %d, want 7", got)
	}
	close(ch)
	if got := Receive(t, "the close", ch); got != 0 {
		t.Errorf("Receive() on a closed channel = %d, want 0", got)
	}
}
