package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/agent/trust"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// trustAgentEnv, when set, makes the test binary a trust agent (see
// TestMain): the agent runs in a process of its own, so that the
// server's heap can be searched for its key.
const trustAgentEnv = "MESHRELAY_TEST_TRUST_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(trustAgentEnv) != "" {
		os.Exit(runTrustAgent())
	}
	code := m.Run()
	if rolloutPlugins.dir != "" {
		os.RemoveAll(rolloutPlugins.dir)
	}
	os.Exit(code)
}

// runTrustAgent runs a real agent and its trust manager from the
// environment until it is signalled.
func runTrustAgent() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	opts := agent.DefaultOptions()
	opts.Cluster, opts.Server, opts.TokenFile = "east", os.Getenv("AGENT_SERVER"), os.Getenv("AGENT_TOKEN_FILE")
	opts.Insecure, opts.StateDir = true, ""
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("AGENT_KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	a, err := agent.New(opts, emptySource{}, agent.Sinks{newRecordingSink()}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m := trust.New(trust.Options{Cluster: "east", Interval: 100 * time.Millisecond}, a.TrustClient(), trust.KubeSecrets{Client: cs}, cs, nil)
	go func() { _ = m.Run(ctx) }()
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// emptySource publishes one empty input.
type emptySource struct{}

func (emptySource) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	publish(snapshot.Empty)
	<-ctx.Done()
	return nil
}

// recorder forwards TCP connections to a target and keeps every byte
// that crossed in either direction.
type recorder struct {
	lis  net.Listener
	mu   sync.Mutex
	bufs []*bytes.Buffer // one per connection and direction
}

func startRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{lis: lis}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			go r.pipe(in, out)
			go r.pipe(out, in)
		}
	}()
	return r
}

func (r *recorder) pipe(from, to net.Conn) {
	defer to.Close()
	rec := &bytes.Buffer{}
	r.mu.Lock()
	r.bufs = append(r.bufs, rec)
	r.mu.Unlock()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			r.mu.Lock()
			rec.Write(buf[:n])
			r.mu.Unlock()
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []byte
	for _, b := range r.bufs {
		out = append(append(out, b.Bytes()...), 0)
	}
	return out
}

// The intermediate CA's key never leaves its cluster: it is not in the
// bytes that crossed the relay, not in the server's heap, not in Redis —
// while the intermediate certificate, which does travel, is found in all
// three, so the searches can see what they look for.
func TestMeshTrustKeyNeverLeavesTheCluster(t *testing.T) {
	k := testenv.StartKube(t)
	cs, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: policyv1alpha1.DefaultMeshNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := testenv.StartRedis(t)
	pols := &memPolicies{}
	ts := startServerDeps(t, redisStore(t, r, "r1"), "", withPolicies(pols), func(o *Options) { o.InsecureLoopback = true })
	pols.set(t, meshTrustYAML([]string{"east"}, ""))
	wire := startRecorder(t, ts.Addr())

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	conn, err := grpc.NewClient(ts.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reg, err := relayv1.NewAdminClient(conn).RegisterCluster(ts.adminCtx(), &relayv1.RegisterClusterRequest{Cluster: "east", Reusable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(reg.GetToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), trustAgentEnv+"=1", "AGENT_SERVER="+wire.lis.Addr().String(),
		"AGENT_TOKEN_FILE="+tokenFile, "AGENT_KUBECONFIG="+k.KubeconfigPath())
	var agentLog bytes.Buffer
	cmd.Stdout, cmd.Stderr = &agentLog, &agentLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent process:\n%s", agentLog.String())
		}
	})
	// Wait on the server, not the Secret: this process must not read the
	// key before its heap is searched.
	testutil.Eventually(t, "east's intermediate in the status", func() bool {
		c := clusterStatus(t, ts, "east")
		return c != nil && c.GetPhase() == policyv1alpha1.TrustPhaseActive
	})
	heap := heapDump(t)
	stored := redisValues(t, r)
	relayed := wire.bytes()

	s, err := cs.CoreV1().Secrets(policyv1alpha1.DefaultMeshNamespace).Get(context.Background(), trust.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets := keyForms(t, s.Data[trust.KeyCAKey])
	public := [][]byte{s.Data[trust.KeyCACert], []byte(base64.StdEncoding.EncodeToString(s.Data[trust.KeyCACert]))}
	for name, hay := range map[string][]byte{"the relay's bytes": relayed, "the server's heap": heap, "Redis": stored} {
		if !containsAny(hay, public) {
			t.Errorf("%s do not hold the intermediate certificate either: the search cannot see", name)
		}
		if containsAny(hay, secrets) {
			t.Errorf("the intermediate CA's key is in %s", name)
		}
	}
}

// keyForms returns the forms a leaked key could take: its PEM, its DER,
// the DER in base64 (as JSON carries bytes), and its private scalar in
// big-endian bytes and in the little-endian words of a big.Int.
func keyForms(t *testing.T, keyPEM []byte) [][]byte {
	t.Helper()
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatal("ca-key.pem is not PEM")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	d := key.(*ecdsa.PrivateKey).D.FillBytes(make([]byte, 32))
	le := slices.Clone(d)
	slices.Reverse(le)
	return [][]byte{keyPEM, block.Bytes, []byte(base64.StdEncoding.EncodeToString(block.Bytes)), []byte(base64.StdEncoding.EncodeToString(keyPEM)), d, le}
}

func containsAny(hay []byte, needles [][]byte) bool {
	for _, n := range needles {
		if bytes.Contains(hay, n) {
			return true
		}
	}
	return false
}

// heapDump returns this process's heap as runtime/debug writes it.
func heapDump(t *testing.T) []byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "heap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	debug.WriteHeapDump(f.Fd())
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// redisValues returns every value Redis holds, concatenated.
func redisValues(t *testing.T, r *testenv.Redis) []byte {
	t.Helper()
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer c.Close()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, key := range keys {
		typ, err := c.Type(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var vals []string
		switch typ {
		case "string":
			v, err := c.Get(ctx, key).Result()
			vals, _ = []string{v}, err
		case "hash":
			m, _ := c.HGetAll(ctx, key).Result()
			for f, v := range m {
				vals = append(vals, f, v)
			}
		case "list":
			vals, _ = c.LRange(ctx, key, 0, -1).Result()
		case "set":
			vals, _ = c.SMembers(ctx, key).Result()
		case "zset":
			vals, _ = c.ZRange(ctx, key, 0, -1).Result()
		case "stream":
			msgs, _ := c.XRange(ctx, key, "-", "+").Result()
			for _, m := range msgs {
				vals = append(vals, fmt.Sprint(m.Values))
			}
		}
		for _, v := range vals {
			out.WriteString(v)
			out.WriteByte(0)
		}
	}
	return out.Bytes()
}
