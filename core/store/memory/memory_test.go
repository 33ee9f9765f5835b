package memory_test

import (
	"testing"

	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Shared(
		func(t *testing.T) *memory.Store { return memory.New() },
		func(t *testing.T, root *memory.Store, replica string) store.Store { return root.Replica(replica) },
	))
}
