package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"iter"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
)

// outputIndex keeps what status and inspection read of the outputs, so
// that neither decodes every output object of the fleet each time it is
// asked: for each cluster's output of each backend, the set it last saw,
// every resource's parent policies (meta.PoliciesAnnotation) and labels,
// and, by policy, the set's resources it produced.
//
// It follows the outputs as delivery writes them and as readers read them
// from the store (which holds those other replicas wrote too): an output
// whose hash it holds costs a comparison, and a new one decodes only the
// resources whose content it did not hold before. It is safe for
// concurrent use; what it returns is never modified.
type outputIndex struct {
	mu      sync.Mutex
	outputs map[engine.OutputKey]*indexedOutput
}

// indexedOutput is one output set with what was decoded of its resources.
// It holds the set's resources once, in set: per resource it adds only
// the index of its policies and labels among the set's distinct ones,
// which a set's resources mostly share.
type indexedOutput struct {
	set *snapshot.Snapshot
	// metas are the distinct parent policies and labels of the set's
	// resources, in the order they first appear; meta holds, for each
	// resource in the set's order, the index of its own in metas.
	metas []outputMeta
	meta  []uint32
	// spans locate, for each resource in the set's order, its body's one
	// "metadata" member (the zero span for none or several): a resource
	// whose content changes and whose metadata does not (an edit of its
	// spec) keeps what was decoded of it.
	spans []metaSpan
	// perPolicy counts, for every policy (meta.PolicyRef.Key) that some
	// resource names as its parent, those resources.
	perPolicy map[string]int
	// byPolicy lists them, in the set's order, once status or inspection
	// first asks (policyResources): delivery indexes every output it
	// writes, and a fleet-wide edit would otherwise list the resources of
	// every cluster's output by policy for readers that may never come.
	listOnce sync.Once
	byPolicy map[string][]snapshot.ID
}

// outputMeta is what an output resource says of itself that status and
// inspection read: its parent policies and its labels, both shared and
// never modified.
type outputMeta struct {
	policies []string
	labels   map[string]string
}

// indexedResource is an output resource with its parent policies and its
// labels.
type indexedResource struct {
	snapshot.Resource
	policies []string
	labels   map[string]string
}

// resources yields the set's resources in order, each with its policies
// and labels: range over o.resources.
func (o *indexedOutput) resources(yield func(int, indexedResource) bool) {
	i := 0
	for r := range o.set.All() {
		m := o.metas[o.meta[i]]
		if !yield(i, indexedResource{Resource: r, policies: m.policies, labels: m.labels}) {
			return
		}
		i++
	}
}

// seek returns a function that finds the resources of o by ID, with the
// span of their metadata, for IDs asked in increasing order; stop ends
// the walk.
func (o *indexedOutput) seek() (find func(snapshot.ID) (indexedResource, metaSpan, bool), stop func()) {
	next, stop := iter.Pull2(o.resources)
	i, r, more := next()
	find = func(id snapshot.ID) (indexedResource, metaSpan, bool) {
		for more && r.ID.Compare(id) < 0 {
			i, r, more = next()
		}
		if !more || r.ID != id {
			return indexedResource{}, metaSpan{}, false
		}
		return r, o.spans[i], true
	}
	return find, stop
}

// has reports whether the output has resources of policy (by
// meta.PolicyRef.Key).
func (o *indexedOutput) has(policy string) bool { return o.perPolicy[policy] > 0 }

// policyResources returns, for every policy that some resource of the set
// names as its parent, those resources in the set's order. It is listed
// on the first call and never modified.
func (o *indexedOutput) policyResources() map[string][]snapshot.ID {
	o.listOnce.Do(func() { o.byPolicy = listByPolicy(o, o.perPolicy) })
	return o.byPolicy
}

// of returns the indexed form of set, the output of key: the one held when
// its hash is the same, else a new one, which it holds from now on.
func (x *outputIndex) of(key engine.OutputKey, set *snapshot.Snapshot) *indexedOutput {
	x.mu.Lock()
	old := x.outputs[key]
	x.mu.Unlock()
	if old != nil && old.set.Hash() == set.Hash() {
		return old
	}
	o := indexOutput(set, old)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.outputs == nil {
		x.outputs = map[engine.OutputKey]*indexedOutput{}
	}
	x.outputs[key] = o
	return o
}

// retain forgets the outputs keep rejects: those of clusters and backends
// that are gone.
func (x *outputIndex) retain(keep func(engine.OutputKey) bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k := range x.outputs {
		if !keep(k) {
			delete(x.outputs, k)
		}
	}
}

// indexOutput decodes the resources of set, taking those of prev (the
// output the same key held before, or nil) whose content is unchanged.
// The resources of one output mostly name the same policies and carry the
// same labels: they share one slice and one map of each, never modified,
// and a changed resource takes the ones prev's resources hold when they
// are equal, so that an edit does not leave the output with two copies of
// each (the unchanged resources' and the changed ones').
func indexOutput(set *snapshot.Snapshot, prev *indexedOutput) *indexedOutput {
	type knownMeta struct {
		outputMeta
		span metaSpan
	}
	var known map[snapshot.Hash]knownMeta
	// prevOf finds a resource of prev by its ID, with its metadata's span.
	prevOf := func(snapshot.ID) (indexedResource, metaSpan, bool) { return indexedResource{}, metaSpan{}, false }
	if prev != nil {
		known = make(map[snapshot.Hash]knownMeta, prev.set.Len())
		for i, r := range prev.resources {
			known[r.Hash] = knownMeta{outputMeta{policies: r.policies, labels: r.labels}, prev.spans[i]}
		}
		var stop func()
		prevOf, stop = prev.seek()
		defer stop()
	}
	o := &indexedOutput{set: set, meta: make([]uint32, 0, set.Len()), spans: make([]metaSpan, 0, set.Len())}
	var shared *sharedMeta
	// index finds each shared instance's place in metas: instances are
	// one per content, so their identities tell contents apart.
	index := map[metaKey]uint32{}
	perPolicy := map[string]int{}
	for r := range set.All() {
		km, ok := known[r.Hash]
		m, span := km.outputMeta, km.span
		if !ok {
			span = locateMetadata(r.Body)
			if was, wasSpan, found := prevOf(r.ID); found && !span.none() && bytes.Equal(span.of(r.Body), wasSpan.of(was.Body)) {
				m = outputMeta{policies: was.policies, labels: was.labels}
			} else {
				if shared == nil {
					shared = newSharedMeta(prev)
				}
				parents, l := decodeMetadataAt(r.Body, span)
				m = outputMeta{policies: shared.policiesOf(parents), labels: shared.labelsOf(l)}
			}
		}
		o.spans = append(o.spans, span)
		k := keyOfMeta(m)
		i, ok := index[k]
		if !ok {
			i = uint32(len(o.metas))
			index[k] = i
			o.metas = append(o.metas, m)
		}
		o.meta = append(o.meta, i)
		for _, p := range m.policies {
			perPolicy[p]++
		}
	}
	o.metas = slices.Clip(o.metas)
	o.perPolicy = perPolicy
	return o
}

// listByPolicy lists o's resources by policy, given how many each policy has:
// every list is cut from one array, no longer than it needs to be.
func listByPolicy(o *indexedOutput, perPolicy map[string]int) map[string][]snapshot.ID {
	total := 0
	for _, n := range perPolicy {
		total += n
	}
	ids := make([]snapshot.ID, 0, total)
	out := make(map[string][]snapshot.ID, len(perPolicy))
	for p, n := range perPolicy {
		out[p] = ids[len(ids) : len(ids) : len(ids)+n]
		ids = ids[:len(ids)+n]
	}
	for _, r := range o.resources {
		for _, p := range r.policies {
			out[p] = append(out[p], r.ID)
		}
	}
	return out
}

// metaKey is the identity of an outputMeta's shared instances.
type metaKey struct {
	policies *string
	n        int
	labels   unsafe.Pointer
}

func keyOfMeta(m outputMeta) metaKey {
	return metaKey{policies: unsafe.SliceData(m.policies), n: len(m.policies), labels: reflect.ValueOf(m.labels).UnsafePointer()}
}

// sharedMeta hands out one slice of parent policies and one map of labels
// for equal contents, starting from those an output's resources hold.
type sharedMeta struct {
	// byAnnotation holds the split policies by their annotation;
	// policies and labels the shared instances by content.
	byAnnotation map[string][]string
	policies     map[string][]string
	labels       map[string]map[string]string
}

// newSharedMeta returns a sharedMeta holding the instances of prev's
// resources (none for nil).
func newSharedMeta(prev *indexedOutput) *sharedMeta {
	m := &sharedMeta{byAnnotation: map[string][]string{}, policies: map[string][]string{}, labels: map[string]map[string]string{}}
	if prev == nil {
		return m
	}
	for _, pm := range prev.metas {
		m.policies[policiesKey(pm.policies)] = pm.policies
		m.labels[labelsKey(pm.labels)] = pm.labels
	}
	return m
}

// policiesOf returns the shared slice of the policies annotation names.
func (m *sharedMeta) policiesOf(annotation string) []string {
	if ps, ok := m.byAnnotation[annotation]; ok {
		return ps
	}
	ps := meta.SplitPolicies(annotation)
	if shared, ok := m.policies[policiesKey(ps)]; ok {
		ps = shared
	} else {
		m.policies[policiesKey(ps)] = ps
	}
	m.byAnnotation[annotation] = ps
	return ps
}

// labelsOf returns the shared map equal to l.
func (m *sharedMeta) labelsOf(l map[string]string) map[string]string {
	key := labelsKey(l)
	if shared, ok := m.labels[key]; ok {
		return shared
	}
	m.labels[key] = l
	return l
}

// policiesKey is the same string for the same policies, in order.
func policiesKey(ps []string) string { return strings.Join(ps, "\n") }

// decodeOutputMeta returns the parent policies (meta.PoliciesAnnotation)
// and the labels of an output object's JSON; none when it does not decode.
// It returns what json.Unmarshal of the whole body into objectMeta gives
// (FuzzDecodeOutputMeta holds it to that) without building what it does
// not need.
//
// The bodies are valid JSON, checked by the plugin host (protocol/host's
// checkBody) or by their hash when loaded from the store, so it reads only
// the top-level "metadata" and skips the other members by their outline
// (snapshot.ObjectMembers): the spec, most of an output, is never decoded.
// A body whose outline is not an object's goes to json.Unmarshal; one with
// invalid JSON inside another member than "metadata", which json.Unmarshal
// would refuse whole, keeps its metadata. Within "metadata", which must be
// valid JSON (snapshot.ValidJSON), metaDecoder walks the members the same way: it
// decodes the labels and, of the annotations, only the policies one's
// value, never building the annotations map.
//
// It locates the metadata first (locateMetadata) and decodes it where it
// is (decodeMetadataAt), so that a caller holding what an equal metadata
// member decoded to need not decode it again.
func decodeOutputMeta(body []byte) (policies string, labels map[string]string) {
	return decodeMetadataAt(body, locateMetadata(body))
}

// metaSpan is where the value of an output body's "metadata" member is:
// body[start:end]. The zero span stands for a body with no such member,
// or several, or whose outline is not an object's.
type metaSpan struct{ start, end uint32 }

func (s metaSpan) none() bool { return s.end == 0 }

// of returns the member's value in body.
func (s metaSpan) of(body []byte) []byte { return body[s.start:s.end] }

// locateMetadata returns the span of body's one "metadata" member (by
// bytes.EqualFold, as json.Unmarshal matches it), reading body's outline
// whole: the zero span when there is none or several, or the outline is
// malformed. What decodeOutputMeta returns for a body with a span is a
// function of the span's bytes alone.
func locateMetadata(body []byte) metaSpan {
	var span metaSpan
	n := 0
	ok, _ := snapshot.ObjectMembers(body, func(key, value []byte) error {
		if bytes.EqualFold(key, []byte("metadata")) {
			n++
			start := int(uintptr(unsafe.Pointer(unsafe.SliceData(value))) - uintptr(unsafe.Pointer(unsafe.SliceData(body))))
			span = metaSpan{start: uint32(start), end: uint32(start + len(value))}
		}
		return nil
	})
	if !ok || n != 1 || len(body) > math.MaxUint32 {
		return metaSpan{}
	}
	return span
}

// decodeMetadataAt is decodeOutputMeta for a body whose metadata
// locateMetadata found at span: it decodes that member alone, or, for the
// zero span, walks body again.
func decodeMetadataAt(body []byte, span metaSpan) (policies string, labels map[string]string) {
	var d metaDecoder
	if !span.none() {
		if d.metadata(span.of(body)) != nil {
			return "", nil
		}
		return d.policies, d.labels
	}
	ok, err := snapshot.ObjectMembers(body, func(key, value []byte) error {
		if bytes.EqualFold(key, []byte("metadata")) {
			return d.metadata(value)
		}
		return nil
	})
	if err != nil {
		return "", nil
	}
	if !ok {
		var m objectMeta
		if json.Unmarshal(body, &m) != nil {
			return "", nil
		}
		return m.Metadata.Annotations[meta.PoliciesAnnotation], m.Metadata.Labels
	}
	return d.policies, d.labels
}

// errMetaDecode is metaDecoder's error for metadata that json.Unmarshal
// refuses, by its syntax or by its types; which one does not matter, as
// either leaves decodeOutputMeta with nothing.
var errMetaDecode = errors.New("decode output metadata: not an object of string maps")

// metaDecoder decodes an object's "metadata" members as json.Unmarshal
// does into objectMeta's Metadata, keeping of the annotations only the
// value of meta.PoliciesAnnotation. Like json.Unmarshal, it decodes a
// repeated member again into what the previous one left: a map member
// adds its entries to the map (null makes it nil), the last value of a
// key wins, and a key matches the struct's field name by bytes.EqualFold
// but a map key exactly, once unescaped.
type metaDecoder struct {
	labels map[string]string
	// policies is the annotations' meta.PoliciesAnnotation entry, the
	// empty string when there is none.
	policies string
}

// metadata decodes a "metadata" member's value.
func (d *metaDecoder) metadata(value []byte) error {
	if !snapshot.ValidJSON(value) {
		return errMetaDecode
	}
	switch value[0] {
	case 'n':
		return nil
	case '{':
	default:
		return errMetaDecode
	}
	ok, err := snapshot.ObjectMembers(value, func(key, value []byte) error {
		switch {
		case bytes.EqualFold(key, []byte("labels")):
			return d.labelsMember(value)
		case bytes.EqualFold(key, []byte("annotations")):
			return d.annotationsMember(value)
		}
		return nil
	})
	if err == nil && !ok {
		err = errMetaDecode
	}
	return err
}

// labelsMember decodes a "labels" member's value (valid JSON).
func (d *metaDecoder) labelsMember(value []byte) error {
	switch value[0] {
	case 'n':
		d.labels = nil
		return nil
	case '{':
	default:
		return errMetaDecode
	}
	if d.labels == nil {
		d.labels = map[string]string{}
	}
	_, err := snapshot.ObjectMembers(value, func(key, value []byte) error {
		s, err := decodeMetaString(value)
		if err != nil {
			return err
		}
		d.labels[decodeMetaKey(key)] = s
		return nil
	})
	return err
}

// decodeMetaKey returns a map key as snapshot.ObjectMembers gives it (a
// key without escapes as it is written) as json.Unmarshal decodes it,
// with each byte of invalid UTF-8 replaced by U+FFFD. A key that had
// escapes is valid UTF-8 already, as json.Unmarshal wrote it.
func decodeMetaKey(key []byte) string {
	if utf8.Valid(key) {
		return string(key)
	}
	var s string
	if json.Unmarshal(slices.Concat([]byte(`"`), key, []byte(`"`)), &s) != nil {
		return string(key)
	}
	return s
}

// annotationsMember decodes an "annotations" member's value (valid JSON),
// checking that every value is a string (or null) but decoding only the
// policies one.
func (d *metaDecoder) annotationsMember(value []byte) error {
	switch value[0] {
	case 'n':
		d.policies = ""
		return nil
	case '{':
	default:
		return errMetaDecode
	}
	_, err := snapshot.ObjectMembers(value, func(key, value []byte) error {
		if string(key) == meta.PoliciesAnnotation {
			s, err := decodeMetaString(value)
			d.policies = s
			return err
		}
		if value[0] != '"' && value[0] != 'n' {
			return errMetaDecode
		}
		return nil
	})
	return err
}

// decodeMetaString decodes a map's value (valid JSON) as json.Unmarshal
// does into a string map's entry: a string, or null for the empty string.
// A string with escapes or bytes beyond ASCII goes to json.Unmarshal,
// which replaces invalid UTF-8 as it does in a whole body.
func decodeMetaString(value []byte) (string, error) {
	switch value[0] {
	case 'n':
		return "", nil
	case '"':
	default:
		return "", errMetaDecode
	}
	raw := value[1 : len(value)-1]
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			var s string
			if json.Unmarshal(value, &s) != nil {
				return "", errMetaDecode
			}
			return s, nil
		}
	}
	return string(raw), nil
}

// labelsKey is the same string for the same labels, and another for none
// (nil) than for an empty map: "{" and, in key order, each key and its
// value, each preceded by its length (as a uvarint).
func labelsKey(labels map[string]string) string {
	if labels == nil {
		return ""
	}
	keys := slices.Sorted(maps.Keys(labels))
	n := 1
	for _, k := range keys {
		n += 2*binary.MaxVarintLen64 + len(k) + len(labels[k])
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	var size [binary.MaxVarintLen64]byte
	for _, k := range keys {
		v := labels[k]
		b.Write(binary.AppendUvarint(size[:0], uint64(len(k))))
		b.WriteString(k)
		b.Write(binary.AppendUvarint(size[:0], uint64(len(v))))
		b.WriteString(v)
	}
	return b.String()
}
