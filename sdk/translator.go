package sdk

import (
	"context"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// Translator computes the outputs of one target cluster at a time. It is
// the one interface a plugin must implement; [Serve] runs it.
//
// The SDK calls TranslateTarget for every target cluster that has work:
// with a backend not in [Description.Meshes], or with the mesh of one that
// is. It records what each computation reads from the fleet and, after a
// change, computes again only the targets whose reads the change concerns
// (in the old or the new state), in parallel. A target the change does
// not concern costs nothing: no decode, no encode, no hash.
type Translator interface {
	// Describe says what the translator is. It is called once per plugin
	// start and must not fail.
	Describe() Description
	// TranslateTarget computes the complete desired outputs of
	// req.Target and emits them into resp, which sends them to req.Target
	// only. It must read everything the outputs depend on through
	// req.Fleet and req.Target, and be safe to call concurrently for
	// different targets. Problems with a user's policy are diagnostics on
	// resp; the SDK removes duplicates reported by several targets. An
	// error means the translator could not work at all, and the host keeps
	// delivering the previous outputs.
	TranslateTarget(ctx context.Context, req *Request, resp *Response) error
}

// Request is the computation of one target cluster's outputs.
type Request struct {
	// Target is the cluster whose outputs are computed.
	Target *Cluster
	// Fleet is the whole fleet view; what is read through it is recorded.
	Fleet *Fleet
}

// PolicyValidator is an optional capability of a [Translator] or a
// [FleetTranslator]: ValidatePolicy returns diagnostics for policies the
// translator cannot serve. A policy with an error diagnostic is never
// seen by the translator.
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
	// for every cluster. When every backend is listed, the SDK does not
	// call TranslateTarget for a target with none of their meshes.
	Meshes []string
	// InputKinds are the custom kinds the translator reads, as
	// "group/Kind", at most 256. Of custom resources, an agent watches
	// exactly the kinds some plugin declares here, once their CRDs exist;
	// a custom kind left out never reaches the translator (sdktest drops
	// it from fixtures too). What is always discovered needs no
	// declaration ([AlwaysDiscovered]): the built-in kinds the SDK's
	// accessors read (Services, EndpointSlices, Deployments, StatefulSets,
	// DaemonSets, ReplicaSets, ServiceAccounts, Namespaces, Nodes), the
	// discovery.meshrelay.io kinds agents compute, and the
	// policy.meshrelay.io kinds, which the server reads itself.
	InputKinds []string
	// OutputKinds are every kind the translator may emit, as "group/Kind"
	// ("/Service" for the core group), at most 256. The agents prune by
	// them: an agent looks for the objects of these kinds that it owns and
	// no longer desires, also those left before it restarted, resolving
	// each kind to a version its cluster serves. Emitting a kind not
	// listed is an error.
	OutputKinds []string
}

// builtinKinds are the built-in Kubernetes kinds an agent always
// discovers (core/agent/discovery watches them in every cluster).
var builtinKinds = map[snapshot.GroupKind]bool{
	{Kind: "Service"}:        true,
	{Kind: "ServiceAccount"}: true,
	{Kind: "Namespace"}:      true,
	{Kind: "Node"}:           true,
	{Group: "discovery.k8s.io", Kind: "EndpointSlice"}: true,
	{Group: "apps", Kind: "Deployment"}:                true,
	{Group: "apps", Kind: "StatefulSet"}:               true,
	{Group: "apps", Kind: "DaemonSet"}:                 true,
	{Group: "apps", Kind: "ReplicaSet"}:                true,
}

// AlwaysDiscovered reports whether the agents discover a kind whatever
// the plugins declare: the built-in kinds the SDK's accessors read, the
// discovery.meshrelay.io kinds the agents compute, and the
// policy.meshrelay.io kinds. Any other kind reaches a translator only
// when some plugin declares it in [Description.InputKinds].
func AlwaysDiscovered(group, kind string) bool {
	return group == policyGroup || group == discoveryapi.Group || builtinKinds[snapshot.GroupKind{Group: group, Kind: kind}]
}
