package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
)

// inputAgent is a hand-driven agent stream for input tests.
type inputAgent struct {
	t      *testing.T
	ts     *testServer
	name   string
	stream relayv1.Relay_SyncClient
	cancel context.CancelFunc
}

func newInputAgent(t *testing.T, ts *testServer, cert *tls.Certificate, name string) *inputAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := relayv1.NewRelayClient(ts.dial(cert)).Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: name}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("Sync = %v, %v, want a Welcome", m, err)
	}
	return &inputAgent{t: t, ts: ts, name: name, stream: stream, cancel: cancel}
}

func (a *inputAgent) send(d *snapshotv1.Delta) {
	a.t.Helper()
	if err := a.stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{Delta: d}}}); err != nil {
		a.t.Fatal(err)
	}
}

// ack waits for the server's next input ack.
func (a *inputAgent) ack() *relayv1.Ack {
	a.t.Helper()
	for {
		m, err := a.stream.Recv()
		if err != nil {
			a.t.Fatalf("stream ended before an input ack: %v", err)
		}
		if ack := m.GetAck(); ack != nil && ack.GetSubject() == relayv1.Ack_SUBJECT_INPUT {
			return ack
		}
	}
}

// stored returns the hash of the cluster's input the store holds.
func (a *inputAgent) stored() snapshot.Hash {
	a.t.Helper()
	in, err := a.ts.store.GetInput(a.t.Context(), a.name)
	if err != nil {
		a.t.Fatal(err)
	}
	return in.Hash()
}

// object returns a Kubernetes object's wire form, whose body names its ID.
func object(apiVersion, kind, ns, name, rest string) *snapshotv1.Resource {
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group, version = "", apiVersion
	}
	body := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"namespace":%q}%s}`, apiVersion, kind, name, ns, rest)
	return &snapshotv1.Resource{Id: &snapshotv1.ResourceID{Group: group, Version: version, Kind: kind, Namespace: ns, Name: name}, Body: []byte(body)}
}

func deleteID(name string) *snapshotv1.ResourceID {
	return &snapshotv1.ResourceID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: name}
}

// Everything an agent's input carries is bounded, IDs and deletes
// included, and checked as Kubernetes objects: a delta that is not is
// nacked with the reason, and the cluster's stored input stays as it was.
func TestInputIsBoundedInEverythingItCarries(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.MaxInputBytes, o.MaxInputResources = 64<<10, 1000 })
	cert, err := ts.certificate("east", ts.register("east"))
	if err != nil {
		t.Fatal(err)
	}
	a := newInputAgent(t, ts, cert, "east")
	a.send(&snapshotv1.Delta{Full: true, Version: 1, Upserts: []*snapshotv1.Resource{object("v1", "Service", "default", "reviews", "")}})
	if ack := a.ack(); ack.GetNack() {
		t.Fatalf("the first input was refused: %s", ack.GetError())
	}
	kept := a.stored()

	long := strings.Repeat("n", 200)
	tests := []struct {
		name  string
		parts []*snapshotv1.Delta
		want  string // in the nack's error
	}{{
		name: "a 15 MiB name with an empty body",
		parts: []*snapshotv1.Delta{{BaseVersion: 1, Version: 2, Upserts: []*snapshotv1.Resource{{
			Id: &snapshotv1.ResourceID{Version: "v1", Kind: "Service", Namespace: "default", Name: strings.Repeat("a", 15<<20)}, Body: []byte(`{}`),
		}}}},
		want: "name has 15728640 bytes, over the limit of 4096",
	}, {
		name:  "a name that is not a Kubernetes name",
		parts: []*snapshotv1.Delta{{BaseVersion: 1, Version: 2, Upserts: []*snapshotv1.Resource{object("v1", "Service", "default", "outbound|9080||reviews", "")}}},
		want:  `name "outbound|9080||reviews" is not valid`,
	}, {
		name:  "a namespace that is not a label",
		parts: []*snapshotv1.Delta{{BaseVersion: 1, Version: 2, Upserts: []*snapshotv1.Resource{object("v1", "Service", "a.b", "reviews", "")}}},
		want:  `namespace "a.b" is not valid`,
	}, {
		name: "a body that names another object",
		parts: []*snapshotv1.Delta{{BaseVersion: 1, Version: 2, Upserts: []*snapshotv1.Resource{{
			Id:   &snapshotv1.ResourceID{Version: "v1", Kind: "Service", Namespace: "default", Name: "ratings"},
			Body: []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"evil.example","namespace":"default"}}`),
		}}}},
		want: `body has metadata.name "evil.example"`,
	}, {
		name:  "a delete that is not a Kubernetes name",
		parts: []*snapshotv1.Delta{{BaseVersion: 1, Version: 2, Deletes: []*snapshotv1.ResourceID{deleteID("Reviews")}}},
		want:  `input delete: core/v1/ConfigMap/ns/Reviews: name "Reviews" is not valid`,
	}, {
		name:  "a control character",
		parts: []*snapshotv1.Delta{{BaseVersion: 1, Version: 2, Deletes: []*snapshotv1.ResourceID{deleteID("x\ny")}}},
		want:  `name "x\ny" has a control character`,
	}, {
		// 200 deletes of 200-byte names are 45 KiB a part: the second
		// unfinished part is over the 64 KiB the cluster may hold. The
		// parts after it are dropped unread.
		name: "unfinished parts of deletes",
		parts: func() []*snapshotv1.Delta {
			var ps []*snapshotv1.Delta
			for p := range 4 {
				d := &snapshotv1.Delta{BaseVersion: 1, Version: 2, More: p < 3}
				for i := range 200 {
					d.Deletes = append(d.Deletes, deleteID(fmt.Sprintf("%s-%d-%d", long, p, i)))
				}
				ps = append(ps, d)
			}
			return ps
		}(),
		want: "delta exceeds the limit of 65536 bytes",
	}, {
		name: "more deletes than resources",
		parts: func() []*snapshotv1.Delta {
			d := &snapshotv1.Delta{BaseVersion: 1, Version: 2}
			for i := range 1001 {
				d.Deletes = append(d.Deletes, deleteID(fmt.Sprint("d-", i)))
			}
			return []*snapshotv1.Delta{d}
		}(),
		want: "delta exceeds the limit of 1000 resources",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a.t = t
			for _, p := range tc.parts {
				a.send(p)
			}
			ack := a.ack()
			if !ack.GetNack() || !strings.Contains(ack.GetError(), tc.want) {
				t.Fatalf("input ack = nack %v %q, want a nack saying %q", ack.GetNack(), ack.GetError(), tc.want)
			}
			if len(ack.GetError()) > 16<<10 {
				t.Errorf("the nack's error has %d bytes", len(ack.GetError()))
			}
			if a.stored() != kept {
				t.Fatal("the refused input changed the stored input")
			}
			if h := ts.inputHeld.get("east"); h != (held{}) {
				t.Errorf("after the nack the cluster still holds %+v", h)
			}
		})
	}
	a.t = t
	// The stream still takes a good delta (from the unchanged base).
	a.send(&snapshotv1.Delta{BaseVersion: 1, Version: 3, Upserts: []*snapshotv1.Resource{object("v1", "Service", "default", "ratings", "")}})
	if ack := a.ack(); ack.GetNack() || ack.GetVersion() != 3 {
		t.Fatalf("a good delta after the refusals: %v", ack)
	}
	if a.stored() == kept {
		t.Error("the good delta did not change the stored input")
	}
}

// What a stream holds of an unfinished delta counts against its cluster
// until the stream ends.
func TestUnfinishedInputIsReleasedWhenTheStreamEnds(t *testing.T) {
	ts := startServer(t, nil, "")
	cert, err := ts.certificate("east", ts.register("east"))
	if err != nil {
		t.Fatal(err)
	}
	a := newInputAgent(t, ts, cert, "east")
	a.send(&snapshotv1.Delta{Full: true, Version: 1, More: true, Upserts: []*snapshotv1.Resource{object("v1", "Service", "default", "reviews", "")}})
	testutil.Eventually(t, "the unfinished part to be counted", func() bool { return ts.inputHeld.get("east").parts == 1 })
	a.cancel()
	testutil.Eventually(t, "the ended stream's part to be released", func() bool { return ts.inputHeld.get("east") == (held{}) })
}

func gatewayObject(name string, addresses ...string) *snapshotv1.Resource {
	quoted := make([]string, len(addresses))
	for i, a := range addresses {
		quoted[i] = strconv.Quote(a)
	}
	return object(discoveryv1alpha1.APIVersion, "Gateway", "istio-system", name,
		`,"spec":{"mesh":"istio","port":15443,"addresses":[`+strings.Join(quoted, ",")+`]}`)
}

// A Gateway's addresses reach other clusters' outputs: an input with an
// address that is neither an IP nor a DNS name, or with too many
// gateways or addresses, is refused with the field at fault, and the
// stored input (what translators read) stays as it was.
func TestInvalidGatewayIsRefused(t *testing.T) {
	ts := startServer(t, nil, "")
	cert, err := ts.certificate("west", ts.register("west"))
	if err != nil {
		t.Fatal(err)
	}
	a := newInputAgent(t, ts, cert, "west")
	a.send(&snapshotv1.Delta{Full: true, Version: 1, Upserts: []*snapshotv1.Resource{gatewayObject("eastwest", "203.0.113.20", "gw.west.example.com")}})
	if ack := a.ack(); ack.GetNack() {
		t.Fatalf("a valid Gateway was refused: %s", ack.GetError())
	}
	kept := a.stored()
	many := func(n int, f func(i int) *snapshotv1.Resource) []*snapshotv1.Resource {
		var out []*snapshotv1.Resource
		for i := range n {
			out = append(out, f(i))
		}
		return out
	}
	var addrs []string
	for i := range discoveryv1alpha1.MaxGatewayAddresses + 1 {
		addrs = append(addrs, fmt.Sprintf("203.0.113.%d", i))
	}
	tests := map[string]struct {
		upserts []*snapshotv1.Resource
		want    string
	}{
		"not a DNS name":     {upserts: []*snapshotv1.Resource{gatewayObject("eastwest", "203.0.113.20", "evil.example.com\n  - address: 198.51.100.66")}, want: "spec.addresses[1]"},
		"a CIDR":             {upserts: []*snapshotv1.Resource{gatewayObject("eastwest", "203.0.113.0/24")}, want: "spec.addresses[0]"},
		"an IP with a zone":  {upserts: []*snapshotv1.Resource{gatewayObject("eastwest", "fe80::1%eth0")}, want: "spec.addresses[0]"},
		"too many addresses": {upserts: []*snapshotv1.Resource{gatewayObject("eastwest", addrs...)}, want: "spec.addresses: Too many"},
		"too many gateways": {
			upserts: many(discoveryv1alpha1.MaxGateways+1, func(i int) *snapshotv1.Resource { return gatewayObject(fmt.Sprint("gw-", i), "203.0.113.1") }),
			want:    "over the limit of 16",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a.t = t
			a.send(&snapshotv1.Delta{BaseVersion: 1, Version: 2, Upserts: tc.upserts})
			ack := a.ack()
			if !ack.GetNack() || !strings.Contains(ack.GetError(), tc.want) {
				t.Fatalf("input ack = nack %v %q, want a nack naming %q", ack.GetNack(), ack.GetError(), tc.want)
			}
			if a.stored() != kept {
				t.Fatal("the refused Gateway reached the stored input")
			}
		})
	}
}

// TestAttackInputIDs measures a running server's memory under the
// input attacks on resource IDs. It runs only when asked:
//
//	MESHRELAY_ATTACK_SERVER=127.0.0.1:19900 MESHRELAY_ATTACK_DATA=DATA-DIR \
//	MESHRELAY_ATTACK_PID=PID MESHRELAY_ATTACK=names|nameparts \
//	go test ./core/server -run TestAttackInputIDs -v
//
// "names": 20 deltas of one Service each whose name is 15 MiB, body {}.
// "nameparts": 40 parts like those, each with More set, never finished.
func TestAttackInputIDs(t *testing.T) {
	addr, dataDir := os.Getenv("MESHRELAY_ATTACK_SERVER"), os.Getenv("MESHRELAY_ATTACK_DATA")
	pid, _ := strconv.Atoi(os.Getenv("MESHRELAY_ATTACK_PID"))
	mode := os.Getenv("MESHRELAY_ATTACK")
	if addr == "" || dataDir == "" || pid == 0 || (mode != "names" && mode != "nameparts") {
		t.Skip("set MESHRELAY_ATTACK_SERVER, MESHRELAY_ATTACK_DATA, MESHRELAY_ATTACK_PID and MESHRELAY_ATTACK=names|nameparts to run")
	}
	caPEM, err := os.ReadFile(filepath.Join(dataDir, "ca-bundle.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	_, stream := attackSync(t, addr, dataDir, pool)
	acks, nacks := make(chan struct{}, 100), make(chan string, 100)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			if a := m.GetAck(); a != nil && a.GetSubject() == relayv1.Ack_SUBJECT_INPUT {
				if a.GetNack() {
					nacks <- a.GetError()
				} else {
					acks <- struct{}{}
				}
			}
		}
	}()

	before := rss(t, pid)
	peak := &peakRSS{pid: pid, t: t}
	stop := peak.sample()
	n, more := 20, false
	if mode == "nameparts" {
		n, more = 40, true
	}
	for i := range n {
		id := &snapshotv1.ResourceID{Version: "v1", Kind: "Service", Namespace: "default", Name: fmt.Sprintf("%d-%s", i, strings.Repeat("a", 15<<20))}
		d := &snapshotv1.Delta{BaseVersion: uint64(i), Version: uint64(i + 1), Upserts: []*snapshotv1.Resource{{Id: id, Body: []byte(`{}`)}}}
		if more {
			d = &snapshotv1.Delta{Full: true, Version: 1, More: true, Upserts: d.Upserts}
		}
		if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{Delta: d}}}); err != nil {
			t.Logf("part %d: %v", i, err)
			break
		}
	}
	// Hold the attack a moment, as an attacker would, then disconnect:
	// stale inputs stay.
	time.Sleep(3 * time.Second)
	stream.CloseSend()
	time.Sleep(2 * time.Second)
	runtime.GC()
	stop()
	after := rss(t, pid)
	t.Logf("acks %d, nacks %d", len(acks), len(nacks))
	if len(nacks) > 0 {
		t.Logf("first nack: %.200s", <-nacks)
	}
	t.Logf("server RSS: before %d MiB, peak during the attack %d MiB, 2s after the agent left %d MiB", before>>20, peak.max>>20, after>>20)
}

// TestRefusedInputIsNotResentInALoop: an agent whose whole input is over
// the server's limit does not send it again after the nack: it waits for
// its input to change, and the change, which fits, is accepted.
func TestRefusedInputIsNotResentInALoop(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.MaxInputResources = 3 })
	east := startAgent(t, ts, "east", ts.register("east"))
	east.src.set(t, "a", "b", "c", "d", "e")
	testutil.Eventually(t, "the input refused", func() bool {
		var m dto.Metric
		return ts.m.inputNacks.Write(&m) == nil && m.GetCounter().GetValue() >= 1
	})
	sent := east.Stats.InputMessages.Load()
	time.Sleep(time.Second) // what the agent sends meanwhile is the check
	if got := east.Stats.InputMessages.Load(); got != sent {
		t.Fatalf("the agent sent %d more input messages with nothing changed, after the server refused them whole", got-sent)
	}
	east.src.set(t, "a", "b")
	testutil.Eventually(t, "the input that fits accepted", func() bool { return hasInput(ts, "east") })
}
