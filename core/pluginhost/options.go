package pluginhost

import (
	"errors"
	"time"

	"github.com/meshrelay/meshrelay/sdk/protocol"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
	"github.com/spf13/pflag"
)

// Options configure how plugins are started and called.
type Options struct {
	// StartTimeout bounds a plugin's start: process, handshake and Describe.
	StartTimeout time.Duration
	// CallTimeout bounds how long a Translate call may make no progress:
	// the plugin takes no part of the update (the host's sends wait on it)
	// and sends no output part and no Done. A plugin silent that long is
	// taken as hung: it is killed and restarted. A call that progresses
	// is not bounded, so a view of any size is taken and answered; what
	// the plugin computes silently in one go (one target, or a whole
	// fleet for an sdk.FleetTranslator) must fit in it. A plugin that
	// stops or freezes is found sooner by the health check
	// (HealthTimeout).
	CallTimeout time.Duration
	// HealthInterval is how often a plugin's health is checked, and
	// HealthTimeout how long the check may take before the plugin is taken
	// as hung and killed (see [Host.Watch]).
	HealthInterval, HealthTimeout time.Duration
	// BackoffBase and BackoffMax bound the exponential wait before a plugin
	// that crashed, hung or failed to start is started again.
	BackoffBase, BackoffMax time.Duration
	// MaxOutputBytes bounds the bodies of one (cluster, backend) output set.
	MaxOutputBytes int
}

// DefaultOptions returns the defaults: 30s to start, 60s of silence in a
// call, a health check every 10s that may take 5s, backoff from 250ms to
// 30s, 256 MiB per output set.
func DefaultOptions() Options {
	return Options{
		StartTimeout:   30 * time.Second,
		CallTimeout:    time.Minute,
		HealthInterval: 10 * time.Second,
		HealthTimeout:  5 * time.Second,
		BackoffBase:    250 * time.Millisecond,
		BackoffMax:     30 * time.Second,
		MaxOutputBytes: host.DefaultMaxOutputBytes,
	}
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.StartTimeout, "plugin-start-timeout", o.StartTimeout, "how long a plugin may take to start")
	fs.DurationVar(&o.CallTimeout, "plugin-call-timeout", o.CallTimeout, "how long a translation may make no progress (the plugin takes no part of the view and sends no part of its answer) before the plugin is killed and restarted; a translation that progresses may take as long as the view needs")
	fs.DurationVar(&o.HealthInterval, "plugin-health-interval", o.HealthInterval, "how often each plugin's health is checked, also during a call")
	fs.DurationVar(&o.HealthTimeout, "plugin-health-timeout", o.HealthTimeout, "how long a plugin's health check may take before the plugin is killed and restarted")
	fs.DurationVar(&o.BackoffBase, "plugin-backoff", o.BackoffBase, "first wait before restarting a failed plugin; doubles up to --plugin-backoff-max")
	fs.DurationVar(&o.BackoffMax, "plugin-backoff-max", o.BackoffMax, "longest wait before restarting a failed plugin")
	fs.IntVar(&o.MaxOutputBytes, "plugin-max-output-bytes", o.MaxOutputBytes, "largest output of one plugin for one cluster and backend")
}

// Validate reports whether the options can work.
func (o *Options) Validate() error {
	var errs []error
	if o.StartTimeout <= 0 {
		errs = append(errs, errors.New("--plugin-start-timeout must be positive"))
	}
	if o.CallTimeout <= 0 {
		errs = append(errs, errors.New("--plugin-call-timeout must be positive"))
	}
	if o.HealthInterval <= 0 || o.HealthTimeout <= 0 {
		errs = append(errs, errors.New("--plugin-health-interval and --plugin-health-timeout must be positive"))
	}
	if o.BackoffBase <= 0 || o.BackoffMax < o.BackoffBase {
		errs = append(errs, errors.New("--plugin-backoff must be positive and at most --plugin-backoff-max"))
	}
	if o.MaxOutputBytes < protocol.PartBytes {
		errs = append(errs, errors.New("--plugin-max-output-bytes must be at least 1 MiB"))
	}
	return errors.Join(errs...)
}

// backoff returns the wait before the next start after failures failures.
func (o *Options) backoff(failures int) time.Duration {
	d := o.BackoffBase
	for i := 1; i < failures && d < o.BackoffMax; i++ {
		d *= 2
	}
	return min(d, o.BackoffMax)
}
