package istio

import (
	"encoding/json"
	"sync"

	"google.golang.org/protobuf/proto"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	clientsecurity "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// specCacheLimit is how many specs a generation of the cache holds; the
// cache holds at most two generations.
const specCacheLimit = 1 << 14

// specCache keeps the JSON of Istio specs by their deterministic binary
// encoding. istio.io/api's JSON encoder works by reflection and is most
// of the cost of emitting an object, while its binary encoder is
// generated code; a fleet-wide edit emits every target's objects again,
// most of them unchanged and many the same in every cluster.
//
// The cache is bounded in generations: lookups move what they find into
// the current one, and when the current one is full it becomes the old
// one, dropping what the old one held.
type specCache struct {
	mu       sync.Mutex
	cur, old map[string]json.RawMessage
	limit    int
}

func newSpecCache(limit int) *specCache {
	return &specCache{cur: map[string]json.RawMessage{}, limit: limit}
}

// encoded is an Istio object whose spec is already JSON. The SDK encodes
// it to the same bytes as the typed object: the same fields in the same
// order, less the empty status it drops from typed objects anyway.
type encoded struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              json.RawMessage `json:"spec"`
}

// encode returns what to emit for obj: obj with its spec's JSON from the
// cache, or obj itself when it is of a kind the cache does not know, or
// its spec does not encode (then the SDK reports the error).
func (c *specCache) encode(obj object) any {
	spec, meta := specOf(obj)
	if c == nil || spec == nil {
		return obj
	}
	buf := keyBuffers.Get().(*[]byte)
	defer keyBuffers.Put(buf)
	key, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend((*buf)[:0], spec)
	if err != nil {
		return obj
	}
	*buf = key
	body, ok := c.get(key)
	if !ok {
		if body, err = json.Marshal(spec); err != nil {
			return obj
		}
		c.put(string(key), body)
	}
	return &encoded{TypeMeta: meta.TypeMeta, ObjectMeta: meta.ObjectMeta, Spec: body}
}

// keyBuffers hold the binary encodings that encode looks specs up by,
// which it needs only for the lookup: the cache keeps a copy of those it
// adds.
var keyBuffers = sync.Pool{New: func() any { return new([]byte) }}

// get looks key up; only a key found in the old generation is copied,
// into the current one.
func (c *specCache) get(key []byte) (json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if body, ok := c.cur[string(key)]; ok {
		return body, true
	}
	body, ok := c.old[string(key)]
	if ok {
		c.add(string(key), body)
	}
	return body, ok
}

func (c *specCache) put(key string, body json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(key, body)
}

// add puts key in the current generation, starting a new one first when
// it is full. c.mu is held.
func (c *specCache) add(key string, body json.RawMessage) {
	if len(c.cur) >= c.limit {
		c.old, c.cur = c.cur, make(map[string]json.RawMessage, c.limit)
	}
	c.cur[key] = body
}

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
