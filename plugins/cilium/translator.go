package cilium

import (
	"context"
	"fmt"

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
		Name:     "cilium",
		Version:  "0.1.0",
		Backends: []string{Backend},
		Meshes:   []string{Backend},
		OutputKinds: []string{
			"cilium.io/" + KindNetworkPolicy, "cilium.io/" + KindClusterwidePolicy, "cilium.io/" + KindEnvoyConfig, "/Service",
		},
	}
}

// TranslateTarget emits, when the target runs Cilium, a CiliumNetworkPolicy
// or CiliumClusterwideNetworkPolicy per AccessPolicy that selects
// destinations there, and a Service patch making each of its Services that
// backs a VirtualDestination a ClusterMesh global service.
// TrafficPolicies become a CiliumEnvoyConfig per selected Service where
// Cilium's Envoy takes them, and elsewhere a diagnostic naming what is not
// applied where. The SDK computes only targets with Cilium, the mesh the
// backend declares.
func (t *Translator) TranslateTarget(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	tr := newTranslation(req.Fleet, req.Target)
	globals := tr.globalServices()
	for _, ap := range req.Fleet.AccessPolicies() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cilium target %q: %w", req.Target.Name, err)
		}
		tr.accessPolicy(ap, globals)
	}
	tr.trafficPolicies(req.Fleet.TrafficPolicies())
	for _, out := range tr.outputs {
		resp.Emit(out.obj, out.parents...)
	}
	resp.DiagnoseFleet(tr.diags...)
	return nil
}
