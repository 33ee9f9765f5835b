package memory_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"

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

// TestEncodedOutputDecodedOnceOnRead puts outputs kept encoded and counts
// their decodes: none on Put or ListEncodedOutputs, one for many
// concurrent reads, and a damaged output is the same error on every read,
// until a decoded put of the same version and hash takes its place.
func TestEncodedOutputDecodedOnceOnRead(t *testing.T) {
	ctx := t.Context()
	s := memory.New()
	want := storetest.Snap(t, 3, "out", 4)
	var decodes atomic.Int64
	encoded := func(snap *snapshot.Snapshot, err error) *store.Encoded {
		return store.NewEncoded(want.Version(), want.Hash(), func() (*snapshot.Snapshot, error) {
			decodes.Add(1)
			return snap, err
		})
	}
	if err := s.PutEncodedOutput(ctx, "east", "istio", encoded(want, nil)); err != nil {
		t.Fatal(err)
	}
	damage := errors.New("damaged")
	if err := s.PutEncodedOutput(ctx, "west", "istio", encoded(nil, damage)); err != nil {
		t.Fatal(err)
	}
	// Data that decodes to another snapshot than the hash stored beside it.
	if err := s.PutEncodedOutput(ctx, "north", "istio", encoded(storetest.Snap(t, 3, "other", 4), nil)); err != nil {
		t.Fatal(err)
	}
	if all, err := s.ListEncodedOutputs(ctx, "east"); err != nil || all["istio"].Hash() != want.Hash() {
		t.Fatalf("ListEncodedOutputs(east) = %v, %v", all, err)
	}
	if n := decodes.Load(); n != 0 {
		t.Fatalf("Put and ListEncodedOutputs decoded %d outputs, want 0", n)
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got, err := s.GetOutput(ctx, "east", "istio")
			if err != nil || got != want {
				t.Errorf("GetOutput(east) = %v, %v; want the stored snapshot", got, err)
			}
			if all, err := s.ListOutputs(ctx, "east"); err != nil || all["istio"] != want {
				t.Errorf("ListOutputs(east) = %v, %v; want the stored snapshot", all, err)
			}
		})
	}
	wg.Wait()
	if n := decodes.Load(); n != 1 {
		t.Errorf("16 concurrent reads decoded the output %d times, want 1", n)
	}

	for _, cluster := range []string{"west", "north"} {
		for range 2 {
			if got, err := s.GetOutput(ctx, cluster, "istio"); err == nil || errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), cluster) {
				t.Fatalf("GetOutput(%s) of a damaged output = %v, %v; want a decode error naming it", cluster, got, err)
			}
			if all, err := s.ListOutputs(ctx, cluster); err == nil {
				t.Fatalf("ListOutputs(%s) of a damaged output = %v, nil; want the decode error", cluster, all)
			}
		}
	}
	if err := s.PutOutput(ctx, "west", "istio", want); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetOutput(ctx, "west", "istio"); err != nil || got != want {
		t.Errorf("GetOutput(west) after the output was put again = %v, %v; want it", got, err)
	}
}
