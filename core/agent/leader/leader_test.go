package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const waitTimeout = 60 * time.Second

// elector is one campaigning replica in a test.
type elector struct {
	name    string
	cancel  context.CancelFunc
	done    chan error
	leading chan struct{} // closed when run starts
	stopped chan struct{} // closed when run returns
}

func campaign(t *testing.T, k *testenv.Kube, ns, name string, events *[]string, mu *sync.Mutex, lease, renew time.Duration) *elector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e := &elector{name: name, cancel: cancel, done: make(chan error, 1), leading: make(chan struct{}), stopped: make(chan struct{})}
	record := func(s string) {
		mu.Lock()
		*events = append(*events, s)
		mu.Unlock()
	}
	opts := Options{
		Namespace: ns, Name: "agent", Identity: name,
		LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	go func() {
		e.done <- Run(ctx, k.Config(), opts, func(ctx context.Context) {
			record(name + " started")
			close(e.leading)
			<-ctx.Done()
			record(name + " stopped")
			close(e.stopped)
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-e.done
	})
	return e
}

func TestFailover(t *testing.T) {
	k := testenv.SharedKube(t)
	ns := k.CreateNamespace(t)
	var (
		mu     sync.Mutex
		events []string
	)
	// The lease is long enough that a takeover within it can only come
	// from the release, not from expiry.
	a := campaign(t, k, ns, "a", &events, &mu, 30*time.Second, 10*time.Second)
	testutil.Receive(t, "a leads", a.leading)
	b := campaign(t, k, ns, "b", &events, &mu, 30*time.Second, 10*time.Second)

	// b follows while a leads: the Lease names a.
	cs := kubernetes.NewForConfigOrDie(k.Config())
	testutil.EventuallyWhy(t, "the Lease is held by a", func() (bool, string) {
		lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), "agent", metav1.GetOptions{})
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "a", fmt.Sprint(err)
	})
	select {
	case <-b.leading:
		t.Fatal("b leads while a holds the Lease")
	default:
	}

	// a stops: it releases the Lease, so b takes over long before the
	// 30s lease would expire.
	start := time.Now()
	a.cancel()
	if err := <-a.done; err != nil {
		t.Errorf("a: Run() = %v, want nil after cancel", err)
	}
	testutil.Receive(t, "b leads after a stops", b.leading)
	if took := time.Since(start); took >= 30*time.Second {
		t.Errorf("takeover took %v, want well under the lease duration", took)
	}
	mu.Lock()
	got := append([]string(nil), events...)
	mu.Unlock()
	want := []string{"a started", "a stopped", "b started"}
	if len(got) != len(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events = %v, want %v", got, want)
		}
	}
	a.done <- nil // for the cleanup
}

func TestLostLeadership(t *testing.T) {
	k := testenv.SharedKube(t)
	ns := k.CreateNamespace(t)
	var (
		mu     sync.Mutex
		events []string
	)
	a := campaign(t, k, ns, "a", &events, &mu, 3*time.Second, 2*time.Second)
	testutil.Receive(t, "a leads", a.leading)

	// Someone else takes the Lease: a's run is cancelled and Run says so.
	cs := kubernetes.NewForConfigOrDie(k.Config())
	ctx := context.Background()
	for {
		lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		other := "intruder"
		lease.Spec.HolderIdentity = &other
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.RenewTime = &now
		if _, err := cs.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{}); err == nil {
			break
		}
	}
	testutil.Receive(t, "a's run is cancelled", a.stopped)
	select {
	case err := <-a.done:
		if !errors.Is(err, ErrLost) {
			t.Errorf("Run() = %v, want ErrLost", err)
		}
		a.done <- nil
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after losing the Lease")
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := map[string]struct {
		opts Options
		ok   bool
	}{
		"defaults":                 {opts: Options{Namespace: "n", Name: "l"}, ok: true},
		"no name":                  {opts: Options{Namespace: "n"}},
		"renew longer than lease":  {opts: Options{Namespace: "n", Name: "l", LeaseDuration: time.Second, RenewDeadline: 2 * time.Second}},
		"retry too close to renew": {opts: Options{Namespace: "n", Name: "l", RenewDeadline: time.Second, RetryPeriod: time.Second}},
		"negative":                 {opts: Options{Namespace: "n", Name: "l", RetryPeriod: -1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := tc.opts.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
