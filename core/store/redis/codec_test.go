package redis

import (
	"bytes"
	stdgzip "compress/gzip"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store/storetest"
)

func TestDecodeIsBounded(t *testing.T) {
	var c codec
	snap := storetest.Snap(t, 1, strings.Repeat("x", 4096), 64)
	data, err := c.encode(snap)
	if err != nil {
		t.Fatal(err)
	}
	h := snap.Hash()
	if _, err := c.decode(string(data), "1", string(h[:])); err != nil {
		t.Fatalf("decode within the default bound: %v", err)
	}
	small := codec{maxDecoded: 1024}
	if _, err := small.decode(string(data), "1", string(h[:])); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("decode of %d compressed bytes with a 1 KiB bound: err = %v, want the limit named", len(data), err)
	}
}

// TestDecodeReusesNoSnapshotBytes decodes snapshots of different sizes one
// after another with one codec, which reuses its decompression buffer, and
// checks that each decoded snapshot keeps its own bytes: its hash and every
// resource body are still the ones encoded after the later decodes.
func TestDecodeReusesNoSnapshotBytes(t *testing.T) {
	var c codec
	type decoded struct {
		want, got *snapshot.Snapshot
	}
	var all []decoded
	for i, n := range []int{64, 3, 200, 1, 64} {
		snap := storetest.Snap(t, uint64(i+1), strings.Repeat(string(rune('a'+i)), 100*n), n)
		data, err := c.encode(snap)
		if err != nil {
			t.Fatal(err)
		}
		h := snap.Hash()
		got, err := c.decode(string(data), strconv.Itoa(i+1), string(h[:]))
		if err != nil {
			t.Fatalf("decode %d: %v", i, err)
		}
		all = append(all, decoded{snap, got})
	}
	for i, d := range all {
		if d.got.Hash() != d.want.Hash() {
			t.Errorf("snapshot %d: hash %s after later decodes, want %s", i, d.got.Hash().Short(), d.want.Hash().Short())
		}
		for j, r := range d.got.Resources() {
			if want := d.want.Resources()[j].Body; !bytes.Equal(r.Body, want) {
				t.Fatalf("snapshot %d resource %d: body %.40q after later decodes, want %.40q", i, j, r.Body, want)
			}
		}
	}
}

// TestDecodesStandardGzip decodes a snapshot compressed by the standard
// library's compress/gzip, as releases before klauspost/compress wrote
// them, and checks that what the codec writes reads with compress/gzip:
// stored data moves both ways across that change.
func TestDecodesStandardGzip(t *testing.T) {
	var c codec
	snap := storetest.Snap(t, 7, "standard", 20)
	raw, err := snapshot.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.WriteByte(formatGzip)
	w, _ := stdgzip.NewWriterLevel(&buf, stdgzip.BestSpeed)
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	h := snap.Hash()
	got, err := c.decode(buf.String(), versionField(7), string(h[:]))
	if err != nil || got.Hash() != h {
		t.Fatalf("decode of compress/gzip data = %v, %v; want the snapshot of hash %s", got, err, h.Short())
	}
	data, err := c.encode(snap)
	if err != nil {
		t.Fatal(err)
	}
	r, err := stdgzip.NewReader(bytes.NewReader(data[1:]))
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(back, raw) {
		t.Fatalf("compress/gzip read the codec's data as %d bytes, %v; want the %d bytes of snapshot.Marshal", len(back), err, len(raw))
	}
}
