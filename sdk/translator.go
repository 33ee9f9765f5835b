package sdk

import (
	"context"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
)

// Translator maps the fleet view to per-cluster outputs. It is the one
// interface a plugin must implement.
type Translator interface {
	// Describe says what the translator is. It is called once per plugin
	// start and must not fail.
	Describe() Description
	// Translate computes the complete desired outputs for the fleet in req
	// and emits them into resp. Clusters that get nothing emitted have an
	// empty output. Problems with a user's policy are diagnostics on resp;
	// an error means the translator could not work at all, and the host
	// keeps delivering the previous outputs.
	Translate(ctx context.Context, req *Request, resp *Response) error
}

// PolicyValidator is an optional capability: ValidatePolicy returns
// diagnostics for policies the translator cannot serve. A policy with an
// error diagnostic is not passed to Translate.
type PolicyValidator interface {
	ValidatePolicy(p policyv1alpha1.Policy) []Diagnostic
}

// Description says what a translator is and what it needs.
type Description struct {
	// Name is the plugin's name, as in meshrelay-plugin-NAME.
	Name string
	// Version is the plugin's own version.
	Version string
	// Backends are the backends the translator produces outputs for.
	Backends []string
	// Meshes are those of Backends that need their mesh: such a backend
	// has work only in clusters where discovery found a mesh of the same
	// name (a discovery.meshrelay.io Mesh of that type, such as "istio"),
	// and the translator is not called while no cluster has one. A
	// backend not listed here (a plain NetworkPolicy backend, say) runs
	// for every cluster.
	Meshes []string
	// InputKinds are the kinds the translator reads, as "group/Kind"
	// ("/Service" for the core group), at most 256. The agents discover
	// them: of custom resources, an agent watches exactly the kinds some
	// plugin declares here (and the policy kinds), once their CRDs exist;
	// the built-in Kubernetes kinds it always discovers. A custom kind left
	// out never reaches the translator.
	InputKinds []string
	// OutputKinds are every kind the translator may emit, as "group/Kind"
	// ("/Service" for the core group), at most 256. The agents prune by
	// them: an agent looks for the objects of these kinds that it owns and
	// no longer desires, also those left before it restarted, resolving
	// each kind to a version its cluster serves. A kind left out is pruned
	// only while the agent that applied it runs.
	OutputKinds []string
}

// Request is one translation: the whole fleet view and what changed since the
// previous Translate in the session.
type Request struct {
	// Fleet is the whole fleet view.
	Fleet *Fleet
	// Full is true for the first request of a session, when everything is new.
	Full bool
	// ChangedClusters names clusters whose inputs changed, sorted.
	ChangedClusters []string
	// PoliciesChanged is true when some policy changed.
	PoliciesChanged bool
}
