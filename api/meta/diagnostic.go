package meta

import (
	"cmp"

	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
)

// Severity is how serious a Diagnostic is. Its values are the ones a
// policy's status and the admin API show.
// +kubebuilder:validation:Enum=Error;Warning;Info
type Severity string

// Severities. The zero Severity counts as an error.
const (
	SeverityError   Severity = "Error"
	SeverityWarning Severity = "Warning"
	SeverityInfo    Severity = "Info"
)

// String returns the severity in lower case ("error", "warning", "info"),
// as diagnostics are printed; the zero Severity is "error".
func (s Severity) String() string {
	switch s {
	case SeverityWarning:
		return "warning"
	case SeverityInfo:
		return "info"
	}
	return "error"
}

// IsError reports whether s is an error: SeverityError or the zero Severity.
func (s Severity) IsError() bool { return s != SeverityWarning && s != SeverityInfo }

// PolicyRef names a policy and where it was defined.
type PolicyRef struct {
	Kind, Namespace, Name string
	// Cluster is where the policy was defined; empty for the management source.
	Cluster string
}

// Key returns "Kind/namespace/name", the form PoliciesAnnotation lists.
func (r PolicyRef) Key() string { return r.Kind + "/" + r.Namespace + "/" + r.Name }

// String returns "Kind/namespace/name", with "@cluster" when the policy
// came from a workload cluster.
func (r PolicyRef) String() string {
	if r.Cluster != "" {
		return r.Key() + "@" + r.Cluster
	}
	return r.Key()
}

// Compare orders references by kind, namespace, name and cluster.
func (r PolicyRef) Compare(o PolicyRef) int {
	return cmp.Or(cmp.Compare(r.Kind, o.Kind), cmp.Compare(r.Namespace, o.Namespace),
		cmp.Compare(r.Name, o.Name), cmp.Compare(r.Cluster, o.Cluster))
}

// Diagnostic is a problem a user can fix, reported on the policy that
// caused it.
type Diagnostic struct {
	Severity Severity
	Summary  string
	Detail   string
	// Path is the field at fault, such as "spec.http[0].route[1].weight".
	Path   string
	Policy PolicyRef
	// Cluster is set when the problem concerns one target cluster only.
	Cluster string
	// Plugin is the plugin that reported the problem; the host sets it, and
	// core's own diagnostics name their part ("trust").
	Plugin string
}

// DiagnosticToProto converts d to the plugin protocol, which carries errors
// and warnings: an info travels as a warning. Plugin is not sent; the host
// knows which plugin it talks to.
func DiagnosticToProto(d Diagnostic) *translatorv1.Diagnostic {
	sev := translatorv1.Diagnostic_SEVERITY_ERROR
	if !d.Severity.IsError() {
		sev = translatorv1.Diagnostic_SEVERITY_WARNING
	}
	return &translatorv1.Diagnostic{
		Severity: sev, Summary: d.Summary, Detail: d.Detail, Path: d.Path, Cluster: d.Cluster,
		Policy: &translatorv1.PolicyRef{Kind: d.Policy.Kind, Namespace: d.Policy.Namespace, Name: d.Policy.Name, Cluster: d.Policy.Cluster},
	}
}

// DiagnosticFromProto converts a diagnostic of the plugin protocol, reported
// by plugin. Any severity but a warning is an error.
func DiagnosticFromProto(d *translatorv1.Diagnostic, plugin string) Diagnostic {
	sev := SeverityError
	if d.GetSeverity() == translatorv1.Diagnostic_SEVERITY_WARNING {
		sev = SeverityWarning
	}
	p := d.GetPolicy()
	return Diagnostic{
		Severity: sev, Summary: d.GetSummary(), Detail: d.GetDetail(), Path: d.GetPath(), Cluster: d.GetCluster(), Plugin: plugin,
		Policy: PolicyRef{Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName(), Cluster: p.GetCluster()},
	}
}
