package istio

import (
	"encoding/binary"
	"encoding/json"
	"sync"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	"google.golang.org/protobuf/proto"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	clientsecurity "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// specCacheLimit is how many entries a generation of each of the cache's
// maps holds; a map holds at most two generations.
const specCacheLimit = 1 << 14

// specCache keeps the JSON of Istio specs by their deterministic binary
// encoding, and whole objects, encoded and stamped by the SDK, by that
// encoding, their identity and their parents. istio.io/api's JSON encoder
// works by reflection and is most of the cost of emitting an object,
// while its binary encoder is generated code; a fleet-wide edit emits
// every target's objects again, most of them unchanged and many the same
// in every cluster, and a change of one cluster emits all of that
// cluster's objects again, most of them unchanged.
type specCache struct {
	mu      sync.Mutex
	specs   generations[json.RawMessage]
	objects generations[sdk.Encoded]
}

func newSpecCache(limit int) *specCache {
	return &specCache{specs: newGenerations[json.RawMessage](limit), objects: newGenerations[sdk.Encoded](limit)}
}

// encoded is an Istio object whose spec is already JSON. The SDK encodes
// it to the same bytes as the typed object: the same fields in the same
// order, less the empty status it drops from typed objects anyway.
type encoded struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              json.RawMessage `json:"spec"`
}

// emit emits obj with parents into resp. An object of a kind the cache
// knows is emitted as the cache holds it, or encoded with its spec's
// JSON from the cache and kept; any other, or one whose spec does not
// encode, is emitted as it is (then the SDK reports the error).
func (c *specCache) emit(resp *sdk.Response, obj object, parents []policyv1alpha1.Policy) {
	spec, meta := specOf(obj)
	if c == nil || spec == nil {
		resp.Emit(obj, parents...)
		return
	}
	buf := keyBuffers.Get().(*[]byte)
	defer keyBuffers.Put(buf)
	key, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend((*buf)[:0], spec)
	if err != nil {
		resp.Emit(obj, parents...)
		return
	}
	specKey := len(key)
	cacheable := namedOnly(&meta.ObjectMeta)
	if cacheable {
		key = appendObjectKey(key, meta, parents)
	}
	*buf = key
	if cacheable {
		if enc, ok := c.object(key); ok {
			resp.Emit(enc)
			return
		}
	}
	body, ok := c.spec(key[:specKey])
	if !ok {
		if body, err = json.Marshal(spec); err != nil {
			resp.Emit(obj, parents...)
			return
		}
		c.putSpec(string(key[:specKey]), body)
	}
	withSpec := &encoded{TypeMeta: meta.TypeMeta, ObjectMeta: meta.ObjectMeta, Spec: body}
	if !cacheable {
		resp.Emit(withSpec, parents...)
		return
	}
	enc, err := resp.Encode(withSpec, parents...)
	if err != nil {
		resp.Emit(obj, parents...)
		return
	}
	c.putObject(string(key), enc)
	resp.Emit(enc)
}

// appendObjectKey appends to the binary encoding of an object's spec
// what else its encoding depends on: its type, namespace and name, and
// its parents, which the SDK stamps it with. Each is length-prefixed and
// the spec's length ends the key, so two different objects never have
// the same key.
func appendObjectKey(key []byte, meta objectMeta, parents []policyv1alpha1.Policy) []byte {
	specLen := len(key)
	key = appendString(key, meta.APIVersion)
	key = appendString(key, meta.Kind)
	key = appendString(key, meta.Namespace)
	key = appendString(key, meta.Name)
	for _, p := range parents {
		key = appendString(key, sdk.RefOf(p).Key())
	}
	return binary.BigEndian.AppendUint64(key, uint64(specLen))
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// namedOnly says whether m holds nothing but a name and a namespace: all
// the plugin sets on the objects it emits, and all of its metadata an
// object's key in the cache holds.
func namedOnly(m *metav1.ObjectMeta) bool {
	return m.GenerateName == "" && m.SelfLink == "" && m.UID == "" && m.ResourceVersion == "" && m.Generation == 0 &&
		m.CreationTimestamp.IsZero() && m.DeletionTimestamp == nil && m.DeletionGracePeriodSeconds == nil &&
		len(m.Labels) == 0 && len(m.Annotations) == 0 && len(m.OwnerReferences) == 0 && len(m.Finalizers) == 0 &&
		len(m.ManagedFields) == 0
}

// keyBuffers hold the keys that emit looks objects and specs up by, which
// it needs only for the lookup: the cache keeps a copy of those it adds.
var keyBuffers = sync.Pool{New: func() any { return new([]byte) }}

func (c *specCache) spec(key []byte) (json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.specs.get(key)
}

func (c *specCache) putSpec(key string, body json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.specs.add(key, body)
}

func (c *specCache) object(key []byte) (sdk.Encoded, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.objects.get(key)
}

func (c *specCache) putObject(key string, enc sdk.Encoded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objects.add(key, enc)
}

// generations is a map bounded in generations: lookups move what they
// find into the current one, and when the current one is full it becomes
// the old one, dropping what the old one held. It is not safe for
// concurrent use.
type generations[V any] struct {
	cur, old map[string]V
	limit    int
}

func newGenerations[V any](limit int) generations[V] {
	return generations[V]{cur: map[string]V{}, limit: limit}
}

// get looks key up; only a key found in the old generation is copied,
// into the current one.
func (g *generations[V]) get(key []byte) (V, bool) {
	if v, ok := g.cur[string(key)]; ok {
		return v, true
	}
	v, ok := g.old[string(key)]
	if ok {
		g.add(string(key), v)
	}
	return v, ok
}

// add puts key in the current generation, starting a new one first when
// it is full.
func (g *generations[V]) add(key string, v V) {
	if len(g.cur) >= g.limit {
		g.old, g.cur = g.cur, make(map[string]V, g.limit)
	}
	g.cur[key] = v
}

// len returns how many entries the two generations hold.
func (g *generations[V]) len() int { return len(g.cur) + len(g.old) }

// objectMeta is the part of an Istio object beside its spec.
type objectMeta struct {
	metav1.TypeMeta
	metav1.ObjectMeta
}

// specOf returns the istio.io/api spec of obj and the rest of it, for the
// kinds the plugin emits; nil for any other.
func specOf(obj object) (proto.Message, objectMeta) {
	switch o := obj.(type) {
	case *clientnetworking.DestinationRule:
		return &o.Spec, objectMeta{o.TypeMeta, o.ObjectMeta}
	case *clientnetworking.Gateway:
		return &o.Spec, objectMeta{o.TypeMeta, o.ObjectMeta}
	case *clientnetworking.ServiceEntry:
		return &o.Spec, objectMeta{o.TypeMeta, o.ObjectMeta}
	case *clientnetworking.VirtualService:
		return &o.Spec, objectMeta{o.TypeMeta, o.ObjectMeta}
	case *clientsecurity.AuthorizationPolicy:
		return &o.Spec, objectMeta{o.TypeMeta, o.ObjectMeta}
	case *clientsecurity.PeerAuthentication:
		return &o.Spec, objectMeta{o.TypeMeta, o.ObjectMeta}
	}
	return nil, objectMeta{}
}
