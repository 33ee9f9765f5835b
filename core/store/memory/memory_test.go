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

// TestEncodedInputDecodedOnceOnRead puts inputs kept encoded, as a cold
// start does: Put and ListEncodedInputs decode nothing, concurrent reads
// decode once, a damaged input is the same error naming its cluster on
// every read (never "not found" or an empty input) until its agent's
// input of the same version and hash takes its place, and the version
// rule holds without decoding.
func TestEncodedInputDecodedOnceOnRead(t *testing.T) {
	ctx := t.Context()
	s := memory.New()
	events, err := s.Replica("other").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := storetest.Snap(t, 3, "in", 4)
	var decodes atomic.Int64
	encoded := func(snap *snapshot.Snapshot, err error) *store.Encoded {
		return store.NewEncoded(want.Version(), want.Hash(), func() (*snapshot.Snapshot, error) {
			decodes.Add(1)
			return snap, err
		})
	}
	if err := s.PutEncodedInput(ctx, "east", encoded(want, nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEncodedInput(ctx, "west", encoded(nil, errors.New("damaged"))); err != nil {
		t.Fatal(err)
	}
	// An older input, encoded or not, does not replace a newer one.
	if err := s.PutEncodedInput(ctx, "east", store.Decoded(storetest.Snap(t, 2, "older", 1))); err != nil {
		t.Fatal(err)
	}
	if all, err := store.ListEncodedInputs(ctx, s); err != nil || len(all) != 2 || all["east"].Hash() != want.Hash() {
		t.Fatalf("ListEncodedInputs = %v, %v; want east and west, east as put", all, err)
	}
	if n := decodes.Load(); n != 0 {
		t.Fatalf("Put and ListEncodedInputs decoded %d inputs, want 0", n)
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got, err := s.GetInput(ctx, "east"); err != nil || got != want {
				t.Errorf("GetInput(east) = %v, %v; want the stored snapshot", got, err)
			}
		})
	}
	wg.Wait()
	if n := decodes.Load(); n != 1 {
		t.Errorf("8 concurrent reads decoded the input %d times, want 1", n)
	}
	for range 2 {
		if got, err := s.GetInput(ctx, "west"); err == nil || errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"west"`) {
			t.Fatalf("GetInput(west) of a damaged input = %v, %v; want a decode error naming it", got, err)
		}
		if all, err := s.ListInputs(ctx); err == nil {
			t.Fatalf("ListInputs with a damaged input = %v, nil; want the decode error", all)
		}
	}
	// The two encoded puts are published; the agent's input that takes the
	// damaged one's place, of the same version and hash, is not.
	for range 2 {
		if ev := <-events; ev.Kind != store.EventInput {
			t.Fatalf("event %+v, want an input's", ev)
		}
	}
	if err := s.PutInput(ctx, "west", want); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetInput(ctx, "west"); err != nil || got != want {
		t.Errorf("GetInput(west) after its input was put again = %v, %v; want it", got, err)
	}
	// Events keep their order: the next is that of a later put.
	if err := s.PutInput(ctx, "north", want); err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.Cluster != "north" {
		t.Errorf("a put of the stored version and hash published %+v", ev)
	}
}
