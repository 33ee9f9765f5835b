package sink

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// KubeOptions configures [Kube].
type KubeOptions struct {
	// ServerID is stamped on every applied object as the meshrelay.io/server
	// annotation; nothing is stamped when empty.
	ServerID string
	// FieldManager is the server-side apply field manager;
	// DefaultFieldManager when empty.
	FieldManager string
	// RetryInterval is how often Run retries resources that failed and
	// looks again for missing kinds; DefaultRetryInterval when zero.
	RetryInterval time.Duration
	// Registerer receives the sink's metrics; they are not registered when
	// nil.
	Registerer prometheus.Registerer
	// Report, when set, is called from Run with the results of resources
	// retried or re-applied after drift, so that the caller can update the
	// status it reported for Apply. A nil error means success.
	Report func(backend string, results map[snapshot.ID]error)
	// Logger receives the sink's logs; slog.Default() when nil.
	Logger *slog.Logger
}

func (o *KubeOptions) setDefaults() {
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options can be used.
func (o KubeOptions) Validate() error {
	if o.RetryInterval < 0 {
		return fmt.Errorf("retry interval %v is negative", o.RetryInterval)
	}
	return nil
}

// AddFlags registers the options' flags on fs.
func (o *KubeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.FieldManager, "sink-field-manager", DefaultFieldManager, "server-side apply field manager")
	fs.DurationVar(&o.RetryInterval, "sink-retry-interval", DefaultRetryInterval,
		"how often resources that failed to apply (such as kinds whose CRD is missing) are retried")
}
