package sdk

import (
	"fmt"
	"sync/atomic"
)

// Shared is a value over the fleet that targets share: computed once per
// state of the fleet, whichever target asks first. Use it for facts
// derived from many clusters that many targets need, such as the trust
// domains of every cluster of a mesh: a target that uses the value depends
// on the value, not on everything computing it read, so it is computed
// again only when the value changes (compared with reflect.DeepEqual).
// Make one with [NewShared], once, as a package-level variable.
type Shared[T any] struct {
	id      string
	compute func(*Fleet) T
}

// NewShared returns the shared value that compute computes. name says
// what it is, in errors and traces; two handles never share a value, even
// under one name. compute reads only through the Fleet it is given, must
// not ask for a shared value, and must not keep the Fleet.
func NewShared[T any](name string, compute func(*Fleet) T) *Shared[T] {
	return &Shared[T]{id: sharedID(name), compute: compute}
}

// Get returns the value over f. Callers must not modify it.
func (s *Shared[T]) Get(f *Fleet) T {
	return getShared(f, s.id, s.compute)
}

// SharedMap is a family of [Shared] values, one per key: the facts of one
// policy or one Service, say, that targets share. Make one with
// [NewSharedMap], once, as a package-level variable.
type SharedMap[K comparable, T any] struct {
	id      string
	compute func(*Fleet, K) T
}

// NewSharedMap returns the family of shared values compute computes, one
// per key; see [NewShared]. Keys are told apart by their Go syntax
// (fmt's %#v), which plain comparable values such as strings and structs
// of strings print distinctly.
func NewSharedMap[K comparable, T any](name string, compute func(*Fleet, K) T) *SharedMap[K, T] {
	return &SharedMap[K, T]{id: sharedID(name), compute: compute}
}

// Get returns the value of key over f. Callers must not modify it.
func (s *SharedMap[K, T]) Get(f *Fleet, key K) T {
	return getShared(f, fmt.Sprintf("%s\x00%#v", s.id, key), func(f *Fleet) T { return s.compute(f, key) })
}

// sharedHandles numbers the handles, so that each has a key of its own.
var sharedHandles atomic.Uint64

func sharedID(name string) string {
	return fmt.Sprintf("%s#%d", name, sharedHandles.Add(1))
}

// getShared returns the value of key over f, computed once per state of
// the fleet in a session and recorded as read; outside a session it is
// computed on every call.
func getShared[T any](f *Fleet, key string, compute func(*Fleet) T) T {
	if f.d.shared == nil {
		return compute(f)
	}
	f.rec.add(read{op: readShared, name: key})
	v := f.d.shared.get(f.d, key, func(f *Fleet) any { return compute(f) })
	return v.(T)
}
