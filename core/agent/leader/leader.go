package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Defaults of Options, those of Kubernetes' own controllers.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ErrLost is returned by Run when leadership was lost before ctx ended.
var ErrLost = errors.New("leadership lost")

// Options configures Run.
type Options struct {
	// Namespace and Name name the Lease.
	Namespace, Name string
	// Identity names this replica in the Lease; the host name with a random
	// suffix when empty.
	Identity string
	// LeaseDuration is how long followers wait before taking over a Lease
	// that was not renewed; DefaultLeaseDuration when zero.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it
	// gives up leading; DefaultRenewDeadline when zero.
	RenewDeadline time.Duration
	// RetryPeriod is how often acquiring and renewing are tried;
	// DefaultRetryPeriod when zero.
	RetryPeriod time.Duration
	// Logger receives the election's logs; slog.Default() when nil.
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("identity: %w", err)
		}
		b := make([]byte, 4)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("identity: %w", err)
		}
		o.Identity = host + "_" + hex.EncodeToString(b)
	}
	return nil
}

// Validate reports whether the options can be used.
func (o Options) Validate() error {
	switch {
	case o.Namespace == "" || o.Name == "":
		return errors.New("lease namespace and name are required")
	case o.LeaseDuration < 0 || o.RenewDeadline < 0 || o.RetryPeriod < 0:
		return errors.New("durations must not be negative")
	}
	d := o
	_ = d.setDefaults()
	if d.LeaseDuration <= d.RenewDeadline {
		return fmt.Errorf("lease duration %v must be longer than renew deadline %v", d.LeaseDuration, d.RenewDeadline)
	}
	if float64(d.RenewDeadline) <= leaderelection.JitterFactor*float64(d.RetryPeriod) {
		return fmt.Errorf("renew deadline %v must be longer than %v times retry period %v",
			d.RenewDeadline, leaderelection.JitterFactor, d.RetryPeriod)
	}
	return nil
}

// Run campaigns for the Lease and calls run while it holds it. run's context
// is cancelled when leadership is lost or ctx ends. Run returns nil once ctx
// has ended, run has returned and the Lease has been released; it returns
// ErrLost when leadership was lost first (after run returned), leaving the
// caller to exit or campaign again.
func Run(ctx context.Context, cfg *rest.Config, opts Options, run func(ctx context.Context)) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	if err := opts.setDefaults(); err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "meshrelay-agent"
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("leader election: create client: %w", err)
	}
	log := opts.Logger.With("lease", opts.Namespace+"/"+opts.Name, "identity", opts.Identity)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.Name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: opts.Identity},
	}

	// The elector runs under its own context so that, when ctx ends, run is
	// stopped and waited for before the elector releases the Lease.
	electCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	var leading atomic.Bool
	runDone := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            opts.Name,
		LeaseDuration:   opts.LeaseDuration,
		RenewDeadline:   opts.RenewDeadline,
		RetryPeriod:     opts.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				leading.Store(true)
				defer close(runDone)
				log.Info("started leading")
				runCtx, cancel := context.WithCancel(leadCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel)
				defer stop()
				run(runCtx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				if id != opts.Identity {
					log.Info("following", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	stop := context.AfterFunc(ctx, func() {
		// A leader stops run before it releases the Lease; a follower
		// stops campaigning at once.
		if leading.Load() {
			<-runDone
		}
		stopElecting()
	})
	defer stop()
	elector.Run(electCtx)
	if leading.Load() {
		<-runDone
	}
	if ctx.Err() != nil {
		log.Info("stopped campaigning")
		return nil
	}
	log.Warn("lost leadership")
	return fmt.Errorf("leader election %s/%s: %w", opts.Namespace, opts.Name, ErrLost)
}

// AddFlags registers the options' flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Namespace, "leader-elect-namespace", o.Namespace, "namespace of the leader election Lease")
	fs.StringVar(&o.Name, "leader-elect-name", o.Name, "name of the leader election Lease")
	fs.StringVar(&o.Identity, "leader-elect-identity", o.Identity, "identity in the Lease (default host name and a random suffix)")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", DefaultLeaseDuration, "how long followers wait before taking over an unrenewed Lease")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", DefaultRenewDeadline, "how long the leader tries to renew before it stops leading")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", DefaultRetryPeriod, "how often to try to acquire or renew the Lease")
}
