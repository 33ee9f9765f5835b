package sdk

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	json "github.com/go-json-experiment/json/v1" // encoding/json's rules and bytes, on the v2 engine
	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Ownership labels and annotations the SDK stamps on every emitted object, so
// an agent knows what it owns and a user can trace each object to its
// policies. They are defined in the vocabulary package, api/meta.
const (
	ManagedByLabel = meta.ManagedByLabel
	ManagedByValue = meta.ManagedByValue
	PluginLabel    = meta.PluginLabel
	// PolicyLabel names the first parent policy as "kind.name", cut to 63 characters.
	PolicyLabel = meta.PolicyLabel
	// PoliciesAnnotation lists every parent policy as "Kind/namespace/name", comma separated.
	PoliciesAnnotation = meta.PoliciesAnnotation
)

// Severity says how bad a diagnostic is: [meta.Severity].
type Severity = meta.Severity

// Severities.
const (
	SeverityError   = meta.SeverityError
	SeverityWarning = meta.SeverityWarning
)

// PolicyRef names a policy and the cluster that defined it: [meta.PolicyRef].
type PolicyRef = meta.PolicyRef

// RefOf returns the reference of a policy.
func RefOf(p policyv1alpha1.Policy) PolicyRef {
	return withKind(PolicyRef{
		Kind:      p.GetObjectKind().GroupVersionKind().Kind,
		Namespace: p.GetNamespace(),
		Name:      p.GetName(),
		Cluster:   p.GetAnnotations()[SourceClusterAnnotation],
	}, p)
}

// withKind fills r's Kind from the Go type of p when TypeMeta is empty.
func withKind(r PolicyRef, p policyv1alpha1.Policy) PolicyRef {
	if r.Kind != "" {
		return r
	}
	switch p.(type) {
	case *policyv1alpha1.TrafficPolicy:
		r.Kind = "TrafficPolicy"
	case *policyv1alpha1.AccessPolicy:
		r.Kind = "AccessPolicy"
	case *policyv1alpha1.VirtualDestination:
		r.Kind = "VirtualDestination"
	}
	return r
}

// Diagnostic is a problem a user can fix, reported on the policy that
// caused it: [meta.Diagnostic]. The host fills in Plugin.
type Diagnostic = meta.Diagnostic

// Errorf returns an error diagnostic on policy p at path.
func Errorf(p policyv1alpha1.Policy, path, format string, args ...any) Diagnostic {
	return Diagnostic{Severity: SeverityError, Summary: fmt.Sprintf(format, args...), Path: path, Policy: RefOf(p)}
}

// Warningf returns a warning diagnostic on policy p at path.
func Warningf(p policyv1alpha1.Policy, path, format string, args ...any) Diagnostic {
	return Diagnostic{Severity: SeverityWarning, Summary: fmt.Sprintf(format, args...), Path: path, Policy: RefOf(p)}
}

// Output is one emitted object, encoded: where it goes, its identity (the
// fields Group, Version, Kind, Namespace and Name of [snapshot.ID]) and its
// body.
type Output struct {
	Cluster, Backend string
	snapshot.ID
	// Body is the object's JSON.
	Body []byte

	// digest is Body's SHA-256 when hashed is set, computed when first
	// needed (sum): an [Encoded] object carries it, so that emitting it
	// again, into any target, does not hash it again.
	digest [32]byte
	hashed bool
}

// sum returns the SHA-256 of o's body, computed once.
func (o *Output) sum() [32]byte {
	if !o.hashed {
		o.digest, o.hashed = sha256.Sum256(o.Body), true
	}
	return o.digest
}

// Encoded is an object encoded and stamped by [Response.Encode], ready to
// be emitted with [Response.Emit] or [Response.EmitFor], into any target
// of the translator's session, at the cost of adding it to the output.
// A translator whose targets emit many equal objects can keep Encoded
// values by what they were made from, and emit them again instead of
// encoding the same object for every target. Its zero value is not an
// object.
type Encoded struct {
	plugin string
	out    Output
}

// ID returns the object's identity.
func (e Encoded) ID() snapshot.ID { return e.out.ID }

// Body returns the object's JSON, which must not be modified.
func (e Encoded) Body() []byte { return e.out.Body }

// Response collects what one target's computation emits and reports. Its
// methods are not safe for concurrent use.
type Response struct {
	collector
	// target is the only cluster emits go to.
	target string
}

// NewResponse returns an empty response for the computation of target by
// a translator described by d. The SDK makes one per target; tests may
// make their own.
func NewResponse(d Description, target string) *Response {
	return &Response{collector: newCollector(d), target: target}
}

// Emit adds obj to the target's output for the translator's only backend.
// obj is any Kubernetes-shaped value (a typed object from client-go or
// istio.io, or an unstructured map) with apiVersion, kind and
// metadata.name, of a kind the translator declares in OutputKinds.
// parents are the policies the object derives from; they become its
// ownership labels. A translator serving several backends uses
// [Response.EmitFor].
func (r *Response) Emit(obj any, parents ...policyv1alpha1.Policy) {
	if b, ok := r.onlyBackend(r.target); ok {
		r.emit(b, r.target, obj, parents)
	}
}

// EmitFor adds obj to the target's output for backend.
func (r *Response) EmitFor(backend string, obj any, parents ...policyv1alpha1.Policy) {
	r.emit(backend, r.target, obj, parents)
}

// Encode encodes obj and stamps it with parents as Emit would, and
// returns it to be emitted later, as many times as needed: an [Encoded]
// is emitted without parents, since it carries their stamp. It fails on
// what Emit would fail the response for: an object that does not encode,
// or of a kind the translator does not declare. An Encoded made by one
// translator's response can be emitted into any target of that
// translator, and is refused by another's.
func (r *Response) Encode(obj any, parents ...policyv1alpha1.Policy) (Encoded, error) {
	if _, ok := obj.(Encoded); ok {
		return Encoded{}, fmt.Errorf("encode: the object is encoded already")
	}
	out, err := r.encode(obj, parents)
	if err != nil {
		return Encoded{}, err
	}
	if err := r.declared(out); err != nil {
		return Encoded{}, err
	}
	out.sum()
	return Encoded{plugin: r.plugin, out: out}, nil
}

// Diagnose adds diagnostics about the target: one without a Cluster gets
// the target's.
func (r *Response) Diagnose(ds ...Diagnostic) {
	for _, d := range ds {
		if d.Cluster == "" {
			d.Cluster = r.target
		}
		r.diags = append(r.diags, d)
	}
}

// DiagnoseFleet adds diagnostics as they are: about the fleet rather than
// the target (no Cluster), or about another cluster. Use it for what a
// [Shared] value found, which every target that reads it reports and the
// SDK sends once.
func (r *Response) DiagnoseFleet(ds ...Diagnostic) { r.diags = append(r.diags, ds...) }

// collector is what both responses share: the emitted outputs, the
// diagnostics and the first emit error.
type collector struct {
	plugin      string
	backends    []string
	outputKinds map[snapshot.GroupKind]bool
	outputs     []Output
	diags       []Diagnostic
	err         error
	// stamps are the stamps made so far for objects of one parent or
	// none: most objects of a target have the same parent, and a stamp is
	// never modified.
	stamps map[stampKey]stamp
}

// stampKey is the parent of objects of one parent or none.
type stampKey struct {
	parent PolicyRef
	one    bool
}

func newCollector(d Description) collector {
	kinds, _ := snapshot.ParseGroupKinds(d.OutputKinds) // validateDescription checked them
	set := make(map[snapshot.GroupKind]bool, len(kinds))
	for _, k := range kinds {
		set[k] = true
	}
	return collector{plugin: d.Name, backends: d.Backends, outputKinds: set}
}

// onlyBackend returns the translator's backend when it has one, and
// fails the response otherwise.
func (r *collector) onlyBackend(cluster string) (string, bool) {
	if len(r.backends) != 1 {
		r.fail(fmt.Errorf("emit to %q: the translator serves %d backends, use EmitFor", cluster, len(r.backends)))
		return "", false
	}
	return r.backends[0], true
}

// emit encodes obj and adds it to cluster's output for backend, or fails
// the response: an unknown backend, an object that does not encode, a
// kind the translator does not declare.
func (r *collector) emit(backend, cluster string, obj any, parents []policyv1alpha1.Policy) {
	if !slices.Contains(r.backends, backend) {
		r.fail(fmt.Errorf("emit to %q: backend %q is not in the translator's description", cluster, backend))
		return
	}
	var out Output
	if e, ok := obj.(Encoded); ok {
		switch {
		case e.plugin == "":
			r.fail(fmt.Errorf("emit to %q: the zero Encoded is not an object", cluster))
			return
		case e.plugin != r.plugin:
			r.fail(fmt.Errorf("emit %s %s/%s to %q: encoded by translator %q, not this one", e.out.Kind, e.out.Namespace, e.out.Name, cluster, e.plugin))
			return
		case len(parents) > 0:
			r.fail(fmt.Errorf("emit %s %s/%s to %q: an Encoded object carries its parents' stamp; emit it without parents", e.out.Kind, e.out.Namespace, e.out.Name, cluster))
			return
		}
		out = e.out
	} else {
		var err error
		if out, err = r.encode(obj, parents); err != nil {
			r.fail(fmt.Errorf("emit to %q: %w", cluster, err))
			return
		}
	}
	if err := r.declared(out); err != nil {
		r.fail(fmt.Errorf("emit %s %s/%s to %q: %w", out.Kind, out.Namespace, out.Name, cluster, err))
		return
	}
	out.Cluster, out.Backend = cluster, backend
	r.outputs = append(r.outputs, out)
}

// declared fails an output of a kind the translator does not declare.
func (r *collector) declared(out Output) error {
	if gk := (snapshot.GroupKind{Group: out.Group, Kind: out.Kind}); !r.outputKinds[gk] {
		return fmt.Errorf("kind %q is not in the translator's OutputKinds", gk.String())
	}
	return nil
}

// Outputs returns what was emitted, sorted by cluster, backend and object.
func (r *collector) Outputs() []Output {
	out := slices.Clone(r.outputs)
	slices.SortFunc(out, func(a, b Output) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Backend, b.Backend), a.ID.Compare(b.ID))
	})
	return out
}

// Diagnostics returns the diagnostics in the order they were added.
func (r *collector) Diagnostics() []Diagnostic { return slices.Clone(r.diags) }

// Err returns the first emit error, if any: an object that could not be
// encoded, of an undeclared kind, or for an unknown backend. Emit errors
// are bugs in the translator.
func (r *collector) Err() error { return r.err }

func (r *collector) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// encode marshals obj and stamps the ownership labels. A typed Kubernetes
// object is marshalled once, stamped as it is written (marshalStamped);
// any other value goes through a generic map.
func (r *collector) encode(obj any, parents []policyv1alpha1.Policy) (Output, error) {
	if typed, ok := obj.(typedObject); ok {
		return r.encodeTyped(typed, parents)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return Output{}, fmt.Errorf("encode object: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return Output{}, fmt.Errorf("encode object: not a JSON object")
	}
	apiVersion, _ := m["apiVersion"].(string)
	kind, _ := m["kind"].(string)
	md, _ := m["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	namespace, _ := md["namespace"].(string)
	if apiVersion == "" || kind == "" || name == "" {
		return Output{}, fmt.Errorf("object needs apiVersion, kind and metadata.name (got %q, %q, %q)", apiVersion, kind, name)
	}
	// Encoders of typed objects write empty timestamps and status; they mean nothing.
	delete(md, "creationTimestamp")
	if st, ok := m["status"].(map[string]any); ok && len(st) == 0 {
		delete(m, "status")
	}
	labels, _ := md["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	stamp := r.stamp(parents)
	for k, v := range stamp.labels {
		labels[k] = v
	}
	if len(stamp.annotations) > 0 {
		ann, _ := md["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
		}
		for k, v := range stamp.annotations {
			ann[k] = v
		}
		md["annotations"] = ann
	}
	md["labels"] = labels
	m["metadata"] = md
	body, err := json.Marshal(m)
	if err != nil {
		return Output{}, fmt.Errorf("encode object: %w", err)
	}
	return outputOf(apiVersion, kind, namespace, name, body), nil
}

// typedObject is a typed Kubernetes object, as client-go and istio.io
// define them.
type typedObject interface {
	metav1.Object
	GetObjectKind() schema.ObjectKind
}

// emptyStatus ends the encoding of a typed object whose status is empty.
var emptyStatus = []byte(`,"status":{}}`)

func (r *collector) encodeTyped(obj typedObject, parents []policyv1alpha1.Policy) (Output, error) {
	apiVersion, kind := obj.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind()
	if apiVersion == "" || kind == "" || obj.GetName() == "" {
		return Output{}, fmt.Errorf("object needs apiVersion, kind and metadata.name (got %q, %q, %q)", apiVersion, kind, obj.GetName())
	}
	body, err := marshalStamped(obj, r.stamp(parents))
	if err != nil {
		return Output{}, fmt.Errorf("encode object: %w", err)
	}
	if bytes.HasSuffix(body, emptyStatus) {
		body = append(body[:len(body)-len(emptyStatus)], '}')
	}
	return outputOf(apiVersion, kind, obj.GetNamespace(), obj.GetName(), body), nil
}

func outputOf(apiVersion, kind, namespace, name string, body []byte) Output {
	h := snapshot.Header{APIVersion: apiVersion, Kind: kind}
	h.Metadata.Name, h.Metadata.Namespace = name, namespace
	return Output{ID: h.ID(), Body: body}
}

// stamp is what the SDK adds to every emitted object.
type stamp struct {
	labels map[string]string
	// annotations holds PoliciesAnnotation, and is empty without parents.
	annotations map[string]string
}

// stamp returns what the SDK adds to an object of parents. What it
// returns is shared: it must not be modified.
func (r *collector) stamp(parents []policyv1alpha1.Policy) stamp {
	if len(parents) > 1 {
		return r.makeStamp(parents)
	}
	var key stampKey
	if len(parents) == 1 {
		key = stampKey{parent: RefOf(parents[0]), one: true}
	}
	if s, ok := r.stamps[key]; ok {
		return s
	}
	s := r.makeStamp(parents)
	if r.stamps == nil {
		r.stamps = map[stampKey]stamp{}
	}
	r.stamps[key] = s
	return s
}

func (r *collector) makeStamp(parents []policyv1alpha1.Policy) stamp {
	s := stamp{labels: map[string]string{ManagedByLabel: ManagedByValue, PluginLabel: r.plugin}}
	if len(parents) == 0 {
		return s
	}
	refs := make([]string, 0, len(parents))
	for _, p := range parents {
		refs = append(refs, RefOf(p).Key())
	}
	slices.Sort(refs)
	refs = slices.Compact(refs)
	first := RefOf(parents[0])
	s.labels[PolicyLabel] = labelValue(strings.ToLower(first.Kind) + "." + first.Name)
	s.annotations = map[string]string{PoliciesAnnotation: meta.JoinPolicies(refs)}
	return s
}

// labelValue cuts s to a valid label value: at most 63 characters, starting
// and ending with an alphanumeric character.
func labelValue(s string) string {
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.TrimRight(s, "-_.")
}
