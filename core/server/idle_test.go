package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/bench"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"
)

// recordCounter forwards TCP connections to a target and counts the TLS
// application-data records that cross it each way, read from the records'
// plaintext headers.
type recordCounter struct {
	lis              net.Listener
	target           string
	toServer, toPeer atomic.Int64
	wg               sync.WaitGroup
}

func startRecordCounter(t *testing.T, target string) *recordCounter {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &recordCounter{lis: lis, target: target}
	rc.wg.Add(1)
	go rc.accept()
	t.Cleanup(func() {
		lis.Close()
		rc.wg.Wait()
	})
	return rc
}

func (rc *recordCounter) accept() {
	defer rc.wg.Done()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for {
		c, err := rc.lis.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", rc.target)
		if err != nil {
			c.Close()
			continue
		}
		conns = append(conns, c, s)
		rc.wg.Add(2)
		go rc.copy(s, c, &rc.toServer)
		go rc.copy(c, s, &rc.toPeer)
	}
}

// copy forwards TLS records from src to dst, counting those of
// application data (content type 23).
func (rc *recordCounter) copy(dst, src net.Conn, n *atomic.Int64) {
	defer rc.wg.Done()
	defer dst.Close()
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
		if _, err := io.ReadFull(src, body); err != nil {
			return
		}
		if hdr[0] == 23 {
			n.Add(1)
		}
		if _, err := dst.Write(append(hdr[:], body...)); err != nil {
			return
		}
	}
}

// An idle agent's heartbeats, and the server's, are one TLS record each,
// answered by none: neither side's HTTP/2 transport answers a message with
// a PING of its own (a bandwidth estimate) that the other side must ack.
func TestIdleHeartbeatsCostOneRecordEach(t *testing.T) {
	const beats = 50
	for name, tc := range map[string]struct {
		server, agent time.Duration
		// from is the side whose heartbeats flow.
		from string
	}{
		"agent":  {server: time.Hour, agent: 20 * time.Millisecond, from: "agent"},
		"server": {server: 100 * time.Millisecond, agent: time.Hour, from: "server"},
	} {
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, nil, "", func(o *Options) { o.Heartbeat = tc.server })
			rc := startRecordCounter(t, ts.Addr())
			east := startAgent(t, ts, "east", ts.register("east"), func(o *agent.Options) {
				o.Server = rc.lis.Addr().String()
				o.Heartbeat = tc.agent
				// The server heartbeats at a third of it, no more often
				// than tc.server.
				o.ServerTimeout = min(3*tc.server, time.Hour)
			})
			east.src.set(t, "a")
			testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 1 })

			beating, answering := &rc.toServer, &rc.toPeer
			if tc.from == "server" {
				beating, answering = answering, beating
			}
			b0, a0 := beating.Load(), answering.Load()
			testutil.Eventually(t, "the heartbeats", func() bool { return beating.Load()-b0 >= beats })
			b, a := beating.Load()-b0, answering.Load()-a0
			// A few records may be late answers to the outputs sent before.
			if a > beats/5 {
				t.Errorf("%d records from the %s (heartbeats) were answered by %d, want none but a few stragglers", b, tc.from, a)
			}
		})
	}
}

// countingStore counts the registry records read and written.
type countingStore struct {
	store.Store
	gets, puts, lists atomic.Int64
}

func (c *countingStore) ListClusters(ctx context.Context) ([]store.Cluster, error) {
	c.lists.Add(1)
	return c.Store.ListClusters(ctx)
}

func (c *countingStore) GetCluster(ctx context.Context, name string) (store.Cluster, error) {
	c.gets.Add(1)
	return c.Store.GetCluster(ctx, name)
}

func (c *countingStore) CompareAndPutCluster(ctx context.Context, cl store.Cluster) (store.Cluster, error) {
	c.puts.Add(1)
	return c.Store.CompareAndPutCluster(ctx, cl)
}

func (c *countingStore) CompareAndPutClusters(ctx context.Context, cs []store.Cluster) ([]store.Cluster, error) {
	c.puts.Add(int64(len(cs)))
	return c.Store.CompareAndPutClusters(ctx, cs)
}

// idleWithOneAgent starts a server heartbeating every 20ms on a counting
// store, with one agent holding its outputs.
func idleWithOneAgent(t *testing.T) *countingStore {
	t.Helper()
	st := &countingStore{Store: memory.New()}
	ts := startServer(t, st, "", func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
	east := startAgent(t, ts, "east", ts.register("east"))
	east.src.set(t, "a")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 1 })
	return st
}

// Each heartbeat period reads a connected agent's registry record once:
// the read that writes its last-seen time also checks its certificate.
func TestIdleAgentRecordReadOncePerHeartbeat(t *testing.T) {
	st := idleWithOneAgent(t)

	const writes = 30
	g0, p0 := st.gets.Load(), st.puts.Load()
	testutil.Eventually(t, "last-seen writes", func() bool { return st.puts.Load()-p0 >= writes })
	gets, puts := st.gets.Load()-g0, st.puts.Load()-p0
	if gets > puts+writes/5 {
		t.Errorf("%d registry reads for %d last-seen writes, want one each", gets, puts)
	}
}

// An idle replica without MeshTrusts does not read the whole registry
// every heartbeat: the mesh trust manager, which reconciles every
// heartbeat, has no cluster to select.
func TestIdleReplicaListsNoClusters(t *testing.T) {
	st := idleWithOneAgent(t)

	const writes = 30
	l0, p0 := st.lists.Load(), st.puts.Load()
	testutil.Eventually(t, "last-seen writes", func() bool { return st.puts.Load()-p0 >= writes })
	if lists := st.lists.Load() - l0; lists > writes/10 {
		t.Errorf("%d registry listings over %d heartbeats, want none", lists, writes)
	}
}

// A stream whose certificate's serial leaves the cluster's record (evicted
// by renewals, on this replica or another) is closed with a goodbye.
func TestStreamClosedWhenSerialEvicted(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.Heartbeat = 50 * time.Millisecond })
	ts.register("east")
	cert, _ := ts.signed(t, "east", time.Hour)
	stream, first, err := syncWithConn(t, ts.dial(cert), &relayv1.Hello{Cluster: "east"})
	if err != nil || first.GetWelcome() == nil {
		t.Fatalf("Sync = %v, %v", first, err)
	}
	for range maxSerials {
		ts.signed(t, "east", time.Hour)
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream ended with %v before a goodbye", err)
		}
		if g := m.GetGoodbye(); g != nil {
			if !strings.Contains(g.GetMessage(), "revoked") {
				t.Errorf("goodbye %q, want it to say the certificate was revoked", g.GetMessage())
			}
			return
		}
	}
}

// The server heartbeats at a third of the server timeout an agent
// announces in its Hello, and every --heartbeat on the stream of an agent
// that announces none (older agents).
func TestServerHeartbeatFollowsAnnouncedTimeout(t *testing.T) {
	const beats = 30
	ts := startServer(t, nil, "", func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
	rc := startRecordCounter(t, ts.Addr())
	east := startAgent(t, ts, "east", ts.register("east"), func(o *agent.Options) {
		o.Server = rc.lis.Addr().String()
		o.Heartbeat = time.Hour
		o.ServerTimeout = time.Hour
	})
	east.src.set(t, "a")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 1 })

	ts.register("west")
	cert, _ := ts.signed(t, "west", time.Hour)
	west, first, err := syncWithConn(t, ts.dial(cert), &relayv1.Hello{Cluster: "west"})
	if err != nil || first.GetWelcome() == nil {
		t.Fatalf("Sync = %v, %v", first, err)
	}
	toEast := rc.toPeer.Load()
	for n := 0; n < beats; {
		m, err := west.Recv()
		if err != nil {
			t.Fatalf("west's stream ended after %d heartbeats: %v", n, err)
		}
		if m.GetHeartbeat() != nil {
			n++
		}
	}
	// A few records may be late answers to east's outputs.
	if n := rc.toPeer.Load() - toEast; n > beats/5 {
		t.Errorf("east, announcing a server timeout of an hour, got %d records while west, announcing none, got %d heartbeats; want a heartbeat every 20 minutes", n, beats)
	}
}

func TestStreamHeartbeat(t *testing.T) {
	for name, tc := range map[string]struct {
		configured, announced, want time.Duration
	}{
		"an agent that announces none":       {configured: 10 * time.Second, want: 10 * time.Second},
		"the default agent":                  {configured: 10 * time.Second, announced: 90 * time.Second, want: 30 * time.Second},
		"a timeout shorter than three beats": {configured: 10 * time.Second, announced: 15 * time.Second, want: 10 * time.Second},
		"a negative timeout":                 {configured: 10 * time.Second, announced: -time.Second, want: 10 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if got := StreamHeartbeat(tc.configured, tc.announced); got != tc.want {
				t.Errorf("StreamHeartbeat(%s, %s) = %s, want %s", tc.configured, tc.announced, got, tc.want)
			}
		})
	}
}

// The fleet benchmark measures the idle cost over two heartbeats of the
// slower side; its idea of the server's heartbeat must follow this one.
func TestBenchIdleWindowCoversServerHeartbeats(t *testing.T) {
	a := agent.DefaultOptions()
	for _, args := range [][]string{nil, {"--heartbeat=45s"}, {"--heartbeat", "2m"}} {
		o := DefaultOptions()
		fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		beat := StreamHeartbeat(o.Heartbeat, a.ServerTimeout)
		if got := bench.IdleWindow(a, args); got < 2*beat || got < 2*a.Heartbeat {
			t.Errorf("bench.IdleWindow(default agent, %q) = %s, want at least two server heartbeats (%s) and two agent heartbeats (%s)", args, got, beat, a.Heartbeat)
		}
	}
}

// On Redis, a heartbeat period's last-seen writes of every agent connected
// to a replica are one script call, not one an agent; each record gets the
// time and the replica.
func TestLastSeenWritesBatchedOnRedis(t *testing.T) {
	const agents, periods = 12, 5
	r := testenv.StartRedis(t)
	ts := startServer(t, redisStore(t, r, "r1"), "", withID("r1"), func(o *Options) { o.Heartbeat = time.Hour })
	for i := range agents {
		name := fmt.Sprintf("c%02d", i)
		ts.register(name)
		cert, _ := ts.signed(t, name, time.Hour)
		if _, first, err := syncWithConn(t, ts.dial(cert), &relayv1.Hello{Cluster: name}); err != nil || first.GetWelcome() == nil {
			t.Fatalf("Sync(%s) = %v, %v", name, first, err)
		}
	}
	testutil.Eventually(t, "every stream attached", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return len(ts.streams) == agents
	})
	client := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	t.Cleanup(func() { client.Close() })
	ctx := t.Context()
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Millisecond)
	for p := range periods {
		ts.touchLastSeen(ctx, now.Add(time.Duration(p)*time.Second))
	}
	stats, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if calls := scriptCalls(t, stats); calls > periods+2 {
		t.Errorf("%d periods of %d agents' last-seen writes made %d script calls to Redis, want one a period\n%s", periods, agents, calls, stats)
	}
	raw := rawRedis(t, r)
	last := now.Add((periods - 1) * time.Second)
	for i := range agents {
		c, err := raw.GetCluster(ctx, fmt.Sprintf("c%02d", i))
		if err != nil || !c.LastSeen.Equal(last) || c.Replica != "r1" {
			t.Errorf("record in Redis = %+v, %v; want last seen %s by r1", c, err, last)
		}
	}
}

// scriptCalls sums the calls of EVAL and EVALSHA in INFO commandstats.
func scriptCalls(t *testing.T, info string) int {
	t.Helper()
	n := 0
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		c, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		n += c
	}
	return n
}

// heartbeatTimes reads n heartbeats from stream and returns the times
// they carry.
func heartbeatTimes(t *testing.T, stream relayv1.Relay_SyncClient, n int) []time.Time {
	t.Helper()
	var times []time.Time
	for len(times) < n {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream ended after %d heartbeats: %v", len(times), err)
		}
		if hb := m.GetHeartbeat(); hb != nil {
			times = append(times, hb.GetTime().AsTime())
		}
	}
	return times
}

// openStream opens an authenticated stream of cluster name, announcing
// serverTimeout; cancel ends it.
func openStream(t *testing.T, ts *testServer, name string, serverTimeout time.Duration) (stream relayv1.Relay_SyncClient, cancel func()) {
	t.Helper()
	ts.register(name)
	cert, _ := ts.signed(t, name, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := relayv1.NewRelayClient(ts.dial(cert)).Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hello := &relayv1.Hello{Cluster: name}
	if serverTimeout > 0 {
		hello.ServerTimeout = durationpb.New(serverTimeout)
	}
	if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("Sync(%s) = %v, %v; want a welcome", name, m, err)
	}
	return stream, cancel
}

// The streams of one heartbeat interval are beaten by one ticker: a
// stream that connected later gets the very heartbeats (the same time)
// the earlier one gets, not heartbeats of a timer of its own.
func TestStreamsOfOneIntervalHeartbeatTogether(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.Heartbeat = 40 * time.Millisecond })
	west, _ := openStream(t, ts, "west", 0)
	heartbeatTimes(t, west, 1)
	east, _ := openStream(t, ts, "east", 0)
	eastTimes := heartbeatTimes(t, east, 3)
	last := eastTimes[len(eastTimes)-1]
	shared := map[time.Time]bool{}
	for _, at := range eastTimes {
		shared[at] = true
	}
	var westTimes []time.Time
	for len(westTimes) == 0 || westTimes[len(westTimes)-1].Before(last) {
		westTimes = append(westTimes, heartbeatTimes(t, west, 1)...)
	}
	for _, at := range westTimes {
		if shared[at] {
			return
		}
	}
	t.Errorf("east's heartbeats at %v, west's at %v: want the same heartbeats on both streams", eastTimes, westTimes)
}

// A replica runs one heartbeat ticker per interval its streams use, and
// none once they are gone.
func TestHeartbeatTickerPerInterval(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.Heartbeat = 40 * time.Millisecond })
	_, endWest := openStream(t, ts, "west", 0)
	_, endEast := openStream(t, ts, "east", 0)
	_, endNorth := openStream(t, ts, "north", time.Second)
	testutil.EventuallyWhy(t, "two intervals, two tickers", func() (bool, string) {
		n := ts.beats.groupCount()
		return n == 2, fmt.Sprintf("%d tickers", n)
	})
	endWest()
	endNorth()
	testutil.EventuallyWhy(t, "east's ticker alone", func() (bool, string) {
		n := ts.beats.groupCount()
		return n == 1, fmt.Sprintf("%d tickers", n)
	})
	endEast()
	testutil.EventuallyWhy(t, "no ticker without streams", func() (bool, string) {
		n := ts.beats.groupCount()
		return n == 0, fmt.Sprintf("%d tickers", n)
	})
}
