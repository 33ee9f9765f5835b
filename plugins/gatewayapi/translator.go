package gatewayapi

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
)

// Backend is the backend the translator serves.
const Backend = "gatewayapi"

// Kinds the translator emits.
const (
	KindHTTPRoute             = "HTTPRoute"
	KindGRPCRoute             = "GRPCRoute"
	KindServer                = "Server"
	KindAuthorizationPolicy   = "AuthorizationPolicy"
	KindMeshTLSAuthentication = "MeshTLSAuthentication"
	// GatewayGroup is the Gateway API's group; LinkerdPolicyGroup
	// Linkerd's policy group.
	GatewayGroup       = "gateway.networking.k8s.io"
	LinkerdPolicyGroup = "policy.linkerd.io"
)

// Translator maps TrafficPolicies to Gateway API mesh routes and, where
// Linkerd runs, AccessPolicies to Linkerd's authorization resources.
type Translator struct{}

// New returns the Gateway API translator.
func New() *Translator { return &Translator{} }

var _ sdk.Translator = (*Translator)(nil)

// Describe says what the translator is. Its backend is not a mesh: which
// clusters it serves depends on the meshes found there (see
// implementationOf), so it declares no Meshes and answers every target.
func (*Translator) Describe() sdk.Description {
	return sdk.Description{
		Name:     "gatewayapi",
		Version:  "0.1.0",
		Backends: []string{Backend},
		// Agents watch Links so that discovery finds the clusters Linkerd
		// multicluster links to (Mesh linkedClusters).
		InputKinds: []string{"multicluster.linkerd.io/Link"},
		OutputKinds: []string{
			GatewayGroup + "/" + KindHTTPRoute, GatewayGroup + "/" + KindGRPCRoute,
			LinkerdPolicyGroup + "/" + KindServer, LinkerdPolicyGroup + "/" + KindAuthorizationPolicy,
			LinkerdPolicyGroup + "/" + KindMeshTLSAuthentication, LinkerdPolicyGroup + "/" + KindHTTPRoute,
		},
	}
}

// TranslateTarget emits the target's routes for the TrafficPolicies
// selecting its Services and, where Linkerd runs, the authorization of
// the AccessPolicies selecting them. A target no implementation serves
// gets nothing.
func (t *Translator) TranslateTarget(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	impl, ok := implementationOf(req.Target)
	if !ok {
		return nil
	}
	tr := newTranslation(req.Fleet, req.Target, impl)
	tr.trafficPolicies(req.Fleet.TrafficPolicies())
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gatewayapi target %q: %w", req.Target.Name, err)
	}
	if impl.Mesh == discoveryapi.MeshLinkerd {
		tr.accessPolicies(req.Fleet.AccessPolicies())
	}
	for _, out := range tr.outputs {
		resp.Emit(out.obj, out.parents...)
	}
	resp.Diagnose(tr.diagnostics()...)
	return nil
}

// output is one object to emit and the policies it derives from.
type output struct {
	obj     any
	parents []policyv1alpha1.Policy
}

// translation is the computation of one target's outputs.
type translation struct {
	fleet   *sdk.Fleet
	target  *sdk.Cluster
	impl    Implementation
	outputs []output
	diags   []sdk.Diagnostic
	seen    map[diagKey]bool
	// authn holds the Linkerd identities of each Allow policy's clients.
	authn map[*policyv1alpha1.AccessPolicy][]string
}

type diagKey struct {
	policy        sdk.PolicyRef
	path, summary string
}

func newTranslation(f *sdk.Fleet, target *sdk.Cluster, impl Implementation) *translation {
	return &translation{fleet: f, target: target, impl: impl, seen: map[diagKey]bool{}}
}

func (tr *translation) emit(obj any, parents ...policyv1alpha1.Policy) {
	tr.outputs = append(tr.outputs, output{obj: obj, parents: parents})
}

// warn adds a warning on p at path, once per target.
func (tr *translation) warn(p policyv1alpha1.Policy, path, format string, args ...any) {
	tr.diagnose(sdk.Warningf(p, path, format, args...))
}

// diagnose adds d, once per target.
func (tr *translation) diagnose(d sdk.Diagnostic) {
	k := diagKey{d.Policy, d.Path, d.Summary}
	if tr.seen[k] {
		return
	}
	tr.seen[k] = true
	tr.diags = append(tr.diags, d)
}

// diagnostics returns the warnings sorted by policy and path.
func (tr *translation) diagnostics() []sdk.Diagnostic {
	out := slices.Clone(tr.diags)
	slices.SortStableFunc(out, func(a, b sdk.Diagnostic) int {
		return cmp.Or(cmp.Compare(a.Policy.Key(), b.Policy.Key()), cmp.Compare(a.Path, b.Path))
	})
	return out
}
