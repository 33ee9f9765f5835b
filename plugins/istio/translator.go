package istio

import (
	"cmp"
	"context"
	"slices"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	clientsecurity "istio.io/client-go/pkg/apis/security/v1"
)

// Name is the plugin's name and Backend the backend it serves.
const (
	Name    = "istio"
	Backend = "istio"
	// Version is the translator's own version.
	Version = "0.1.0"
)

// Translator maps meshrelay policies to Istio resources, one target
// cluster at a time. Its zero value works, without the cache of encoded
// specs that New gives it.
type Translator struct {
	specs *specCache
}

var _ sdk.Translator = (*Translator)(nil)

// New returns the Istio translator.
func New() *Translator { return &Translator{specs: newSpecCache(specCacheLimit)} }

// Describe returns the translator's description.
func (t *Translator) Describe() sdk.Description {
	return sdk.Description{
		Name:     Name,
		Version:  Version,
		Backends: []string{Backend},
		Meshes:   []string{Backend},
		OutputKinds: []string{
			"networking.istio.io/VirtualService", "networking.istio.io/DestinationRule", "networking.istio.io/ServiceEntry",
			"networking.istio.io/Gateway",
			"security.istio.io/AuthorizationPolicy", "security.istio.io/PeerAuthentication",
		},
	}
}

// TranslateTarget emits the Istio resources of one target cluster where
// discovery found Istio (the SDK computes no other, since the backend
// declares its mesh). What it reads is listed in the package
// documentation.
func (t *Translator) TranslateTarget(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	tg := &target{view: newView(req.Fleet), cluster: req.Target, name: req.Target.Name}
	out := newOutputs()
	remote := newRemoteServices()
	plan := &trafficPlan{}
	if len(req.Fleet.TrafficPolicies())+len(req.Fleet.VirtualDestinations()) > 0 {
		plan = planOf(req.Fleet)
		out.diagnose(plan.Diags...)
	}
	if err := translateTraffic(ctx, tg, plan, out, remote); err != nil {
		return err
	}
	if err := translateAccess(ctx, tg, out); err != nil {
		return err
	}
	if err := translateVirtualDestinations(ctx, tg, plan, out); err != nil {
		return err
	}
	crossNetworkGateways(tg, plan, remote, out)
	remote.emit(tg, plan, out)
	out.emit(resp, t.specs)
	return nil
}

// target is the computation of one target cluster's outputs: the target
// is also the client cluster whose clients the outputs serve.
type target struct {
	*view
	cluster *sdk.Cluster
	name    string
}

// byAge orders policies oldest first, then by namespace, name and source
// cluster: the order in which they claim destinations.
func byAge[P policyv1alpha1.Policy](ps []P) []P {
	return slices.SortedStableFunc(slices.Values(ps), func(a, b P) int {
		ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
		if c := ta.Time.Compare(tb.Time); c != 0 {
			return c
		}
		ra, rb := sdk.RefOf(a), sdk.RefOf(b)
		return cmp.Or(cmp.Compare(ra.Namespace, rb.Namespace), cmp.Compare(ra.Name, rb.Name), cmp.Compare(ra.Cluster, rb.Cluster))
	})
}

// typeMeta of the emitted kinds.
var (
	virtualServiceType  = typeMetaOf("networking.istio.io/v1", "VirtualService")
	destinationRuleType = typeMetaOf("networking.istio.io/v1", "DestinationRule")
	serviceEntryType    = typeMetaOf("networking.istio.io/v1", "ServiceEntry")
	gatewayType         = typeMetaOf("networking.istio.io/v1", "Gateway")
	authorizationType   = typeMetaOf("security.istio.io/v1", "AuthorizationPolicy")
	peerAuthnType       = typeMetaOf("security.istio.io/v1", "PeerAuthentication")
)

var (
	_ object = (*clientnetworking.VirtualService)(nil)
	_ object = (*clientnetworking.DestinationRule)(nil)
	_ object = (*clientnetworking.ServiceEntry)(nil)
	_ object = (*clientnetworking.Gateway)(nil)
	_ object = (*clientsecurity.AuthorizationPolicy)(nil)
	_ object = (*clientsecurity.PeerAuthentication)(nil)
)
