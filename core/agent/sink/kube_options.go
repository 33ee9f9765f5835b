package sink

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// DefaultPruneKinds are the kinds the translators emit. Prune looks for
// owned objects of these kinds too, not only of kinds applied since the sink
// started, so objects left by an agent before its restart are found.
var DefaultPruneKinds = []schema.GroupVersionKind{
	{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService"},
	{Group: "networking.istio.io", Version: "v1", Kind: "DestinationRule"},
	{Group: "networking.istio.io", Version: "v1", Kind: "ServiceEntry"},
	{Group: "networking.istio.io", Version: "v1", Kind: "Gateway"},
	{Group: "networking.istio.io", Version: "v1", Kind: "Sidecar"},
	{Group: "networking.istio.io", Version: "v1alpha3", Kind: "EnvoyFilter"},
	{Group: "security.istio.io", Version: "v1", Kind: "AuthorizationPolicy"},
	{Group: "security.istio.io", Version: "v1", Kind: "PeerAuthentication"},
	{Group: "security.istio.io", Version: "v1", Kind: "RequestAuthentication"},
	{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"},
	{Group: "cilium.io", Version: "v2", Kind: "CiliumClusterwideNetworkPolicy"},
	{Group: "cilium.io", Version: "v2", Kind: "CiliumEnvoyConfig"},
	{Group: "cilium.io", Version: "v2", Kind: "CiliumClusterwideEnvoyConfig"},
}

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
	// PruneKinds are kinds searched for objects to prune beside those
	// applied since the sink started; DefaultPruneKinds when nil. Kinds the
	// cluster does not serve are skipped.
	PruneKinds []schema.GroupVersionKind
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
	if o.PruneKinds == nil {
		o.PruneKinds = slices.Clone(DefaultPruneKinds)
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
