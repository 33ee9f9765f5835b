package protocol

import (
	"bytes"
	"crypto/sha256"
	"slices"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// ResourceKey is a digest of one resource's identity and body: two
// resources with the same key are byte for byte the same. Plugin and host
// compare an output set with the last one answered for it by the keys of
// its resources: the plugin to leave out what did not change
// (ClusterOutput.kept), the host to check that what it holds of the last
// answer is what the plugin kept.
type ResourceKey [16]byte

// KeyOf returns the key of the resource id whose body hashes to body
// (snapshot.Resource.Hash, the SHA-256 of the body). Each field of id ends
// with a zero byte, so fields that split the same characters elsewhere
// differ.
func KeyOf(id snapshot.ID, body snapshot.Hash) ResourceKey {
	var arr [256]byte // most identities fit: no allocation
	buf := append(arr[:0], body[:]...)
	for _, f := range [...]string{id.Group, id.Version, id.Kind, id.Namespace, id.Name} {
		buf = append(append(buf, f...), 0)
	}
	sum := sha256.Sum256(buf)
	var k ResourceKey
	copy(k[:], sum[:])
	return k
}

// KeySet is the keys of one output set's resources, sorted: 16 bytes
// each, where a map of them takes about twice that and more.
type KeySet []ResourceKey

// NewKeySet sorts keys, which it takes, into a KeySet no larger than it
// needs to be.
func NewKeySet(keys []ResourceKey) KeySet {
	slices.SortFunc(keys, compareKeys)
	if cap(keys) > len(keys) {
		keys = append(make([]ResourceKey, 0, len(keys)), keys...)
	}
	return keys
}

// Has reports whether the set holds k.
func (s KeySet) Has(k ResourceKey) bool {
	_, found := slices.BinarySearchFunc(s, k, compareKeys)
	return found
}

func compareKeys(a, b ResourceKey) int { return bytes.Compare(a[:], b[:]) }
