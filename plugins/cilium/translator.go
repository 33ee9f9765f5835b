package cilium

import (
	"context"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
)

// Backend is the backend the translator serves.
const Backend = discoveryapi.MeshCilium

// Translator maps the fleet's policies to Cilium resources for every
// cluster where discovery found Cilium.
type Translator struct{}

// New returns the Cilium translator.
func New() *Translator { return &Translator{} }

var _ sdk.Translator = (*Translator)(nil)

// Describe says what the translator is.
func (*Translator) Describe() sdk.Description {
	return sdk.Description{
		Name:       "cilium",
		Version:    "0.1.0",
		Backends:   []string{Backend},
		InputKinds: []string{"/Service", "/Namespace"},
		OutputKinds: []string{
			"cilium.io/" + KindNetworkPolicy, "cilium.io/" + KindClusterwidePolicy, "/Service",
		},
	}
}

// Translate emits, for every cluster with Cilium, a CiliumNetworkPolicy or
// CiliumClusterwideNetworkPolicy per AccessPolicy that selects destinations
// there, and a Service patch making each backing Service of a
// VirtualDestination a ClusterMesh global service. TrafficPolicies, which
// Cilium cannot express, get a diagnostic naming what is not applied where.
func (t *Translator) Translate(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	tr := newTranslation(req.Fleet)
	if len(tr.cilium) == 0 {
		return nil
	}
	globals := tr.globalServices()
	for _, ap := range req.Fleet.AccessPolicies() {
		if err := ctx.Err(); err != nil {
			return err
		}
		tr.accessPolicy(ap, globals)
	}
	for _, tp := range req.Fleet.TrafficPolicies() {
		tr.trafficPolicy(tp)
	}
	tr.checkGlobalCoverage(globals)
	for _, out := range tr.outputs {
		resp.Emit(out.cluster, out.obj, out.parents...)
	}
	resp.Diagnose(tr.diags...)
	return nil
}
