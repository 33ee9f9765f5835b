package sdk

import (
	"context"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
)

// FleetTranslator computes the outputs of every cluster in one call. It
// is the older form of a translator, served by [ServeFleet]: every
// change computes the whole fleet again. New plugins implement
// [Translator].
type FleetTranslator interface {
	// Describe says what the translator is, as [Translator.Describe].
	Describe() Description
	// Translate computes the complete desired outputs for the fleet in req
	// and emits them into resp. Clusters that get nothing emitted have an
	// empty output. Problems with a user's policy are diagnostics on resp;
	// an error means the translator could not work at all, and the host
	// keeps delivering the previous outputs.
	Translate(ctx context.Context, req *FleetRequest, resp *FleetResponse) error
}

// FleetRequest is one translation of a [FleetTranslator]: the whole fleet
// view and what changed since the previous Translate in the session.
type FleetRequest struct {
	// Fleet is the whole fleet view.
	Fleet *Fleet
	// Full is true for the first request of a session, when everything is new.
	Full bool
	// ChangedClusters names clusters whose inputs changed, sorted.
	ChangedClusters []string
	// PoliciesChanged is true when some policy changed.
	PoliciesChanged bool
}

// FleetResponse collects what a [FleetTranslator] emits. Its methods are
// not safe for concurrent use.
type FleetResponse struct{ collector }

// Emit adds obj to cluster's output for the translator's only backend; see
// [Response.Emit].
func (r *FleetResponse) Emit(cluster string, obj any, parents ...policyv1alpha1.Policy) {
	if b, ok := r.onlyBackend(cluster); ok {
		r.emit(b, cluster, obj, parents)
	}
}

// EmitFor adds obj to cluster's output for backend.
func (r *FleetResponse) EmitFor(backend, cluster string, obj any, parents ...policyv1alpha1.Policy) {
	r.emit(backend, cluster, obj, parents)
}

// Diagnose adds diagnostics as they are.
func (r *FleetResponse) Diagnose(ds ...Diagnostic) { r.diags = append(r.diags, ds...) }
