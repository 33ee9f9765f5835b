package server

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
)

// everyMethod lists the full names of every RPC the relay serves.
func everyMethod() []string {
	var out []string
	for _, sd := range []grpc.ServiceDesc{relayv1.Registration_ServiceDesc, relayv1.Relay_ServiceDesc, relayv1.Admin_ServiceDesc, relayv1.Trust_ServiceDesc} {
		for _, m := range sd.Methods {
			out = append(out, "/"+sd.ServiceName+"/"+m.MethodName)
		}
		for _, s := range sd.Streams {
			out = append(out, "/"+sd.ServiceName+"/"+s.StreamName)
		}
	}
	return out
}

// h2Frame encodes one HTTP/2 frame.
func h2Frame(typ, flags byte, id uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], id)
	return append(b, payload...)
}

// callFrames opens stream id calling path (its headers HPACK-encoded with
// enc, which keeps the connection's table) and sends a message prefix
// declaring size bytes, followed by body.
func callFrames(enc *hpack.Encoder, buf *bytes.Buffer, id uint32, path string, size int, body []byte) []byte {
	buf.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"}, {Name: ":path", Value: path},
		{Name: ":authority", Value: "relay"}, {Name: "content-type", Value: "application/grpc"}} {
		_ = enc.WriteField(f)
	}
	out := h2Frame(h2Headers, h2EndHeaders, id, bytes.Clone(buf.Bytes()))
	prefix := make([]byte, grpcPrefix)
	binary.BigEndian.PutUint32(prefix[1:], uint32(size))
	return append(out, h2Frame(h2Data, 0, id, append(prefix, body...))...)
}

// testLimits are small limits for the inspector's tests.
var testLimits = limits{small: 1 << 10, sync: 64 << 10, report: 4 << 10, whole: 1 << 20, conn: 8 << 10, authedConn: 80 << 10}

func newTestInspector(authenticated bool, budget *byteBudget) (*inspectedConn, *string) {
	a, _ := net.Pipe()
	var reason string
	ic := newInspectedConn(a, testLimits, func(_ *inspectedConn, r string, _ error) { reason = r })
	if authenticated {
		ic.authenticate(budget)
	}
	return ic, &reason
}

// Every RPC is held to its own receive limit: a message of the limit is
// let through, one byte more closes the connection, authenticated or not.
func TestInspectorMethodLimits(t *testing.T) {
	for _, authed := range []bool{false, true} {
		for _, method := range everyMethod() {
			limit := testLimits.messageLimit(method, authed)
			want := testLimits.small
			switch {
			case method == relayv1.Relay_Sync_FullMethodName && authed:
				want = testLimits.sync
			case method == relayv1.Trust_Report_FullMethodName:
				want = testLimits.report
			}
			if limit != want {
				t.Errorf("limit of %s (authenticated %v) = %d, want %d", method, authed, limit, want)
			}
			for _, size := range []int{limit, limit + 1} {
				ic, _ := newTestInspector(authed, &byteBudget{max: 1 << 30})
				var buf bytes.Buffer
				enc := hpack.NewEncoder(&buf)
				reason, err := ic.inspect(append([]byte(h2Preface), callFrames(enc, &buf, 1, method, size, nil)...))
				if refused := err != nil; refused != (size > limit) {
					t.Errorf("%s (authenticated %v), a message of %d bytes (limit %d): refused %v (%s %v), want %v", method, authed, size, limit, refused, reason, err, size > limit)
				}
			}
		}
	}
}

// A message of a stream the server ended, finished or reset, no longer
// counts; nor does a closed connection's.
func TestInspectorReleases(t *testing.T) {
	budget := &byteBudget{max: 1 << 20}
	ic, _ := newTestInspector(true, budget)
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	in := append([]byte(h2Preface), callFrames(enc, &buf, 1, relayv1.Relay_Sync_FullMethodName, 40<<10, make([]byte, 100))...)
	in = append(in, callFrames(enc, &buf, 3, relayv1.Relay_Sync_FullMethodName, 30<<10, nil)...)
	if _, err := ic.inspect(in); err != nil {
		t.Fatal(err)
	}
	if ic.inflight != 70<<10 || budget.inUse() != 70<<10 {
		t.Fatalf("in flight %d, cluster %d; want %d", ic.inflight, budget.inUse(), 70<<10)
	}
	ic.written(h2Frame(h2RSTStream, 0, 1, []byte{0, 0, 0, 8}))
	if ic.inflight != 30<<10 || budget.inUse() != 30<<10 {
		t.Fatalf("after a reset: in flight %d, cluster %d; want %d", ic.inflight, budget.inUse(), 30<<10)
	}
	// A message over what is left of the connection's budget is refused.
	if reason, err := ic.inspect(callFrames(enc, &buf, 5, relayv1.Relay_Sync_FullMethodName, 60<<10, nil)); reason != "connection_bytes_in_flight" {
		t.Fatalf("a message over the connection's budget: %q, %v", reason, err)
	}
	ic.Close()
	if budget.inUse() != 0 {
		t.Fatalf("after close the cluster holds %d bytes", budget.inUse())
	}
}

// FuzzInspector feeds arbitrary client bytes, cut anywhere, to a
// connection's inspector: nothing may panic, nothing it lets through is
// over its method's limit or its budgets, and closing returns everything
// to the cluster's budget.
func FuzzInspector(f *testing.F) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i, method := range append(everyMethod(), "/unknown/Method") {
		f.Add(callFrames(enc, &buf, uint32(2*i+1), method, 10, make([]byte, 10)), uint16(20), i%2 == 0)
		f.Add(callFrames(enc, &buf, uint32(2*i+1), method, 5000, make([]byte, 100)), uint16(3), i%2 == 1)
	}
	f.Add(append(h2Frame(h2Headers, h2Padded|h2Priority, 1, []byte{2, 0, 0, 0, 0, 16, 0x82, 0, 0}), h2Frame(h2Data, h2Padded|h2EndStream, 1, []byte{1, 0, 0, 0, 0, 1, 7, 0})...), uint16(11), true)
	f.Fuzz(func(t *testing.T, data []byte, cut uint16, authed bool) {
		budget := &byteBudget{max: 100 << 10}
		ic, _ := newTestInspector(authed, budget)
		in := append([]byte(h2Preface), data...)
		at := min(int(cut), len(in))
		for _, part := range [][]byte{in[:at], in[at:]} {
			if _, err := ic.inspect(part); err != nil {
				break
			}
			connBudget := testLimits.conn
			if authed {
				connBudget = testLimits.authedConn
			}
			var held int64
			for id, s := range ic.streams {
				if s.held > int64(s.limit) {
					t.Fatalf("stream %d holds a message of %d bytes over its limit %d", id, s.held, s.limit)
				}
				held += s.held
			}
			if held != ic.inflight || ic.inflight < 0 || ic.inflight > connBudget || budget.inUse() > budget.max {
				t.Fatalf("held %d, in flight %d (budget %d), cluster %d of %d", held, ic.inflight, connBudget, budget.inUse(), budget.max)
			}
		}
		ic.Close()
		if budget.inUse() != 0 {
			t.Fatalf("after close the cluster holds %d bytes", budget.inUse())
		}
	})
}
