package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	"github.com/meshrelay/meshrelay/plugins/istio"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	vsGVR    = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}
	leaseGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

// Two agent processes of one cluster with --leader-elect: only the leader
// applies; when it dies (SIGKILL, no goodbye), the other takes over and
// applies new outputs, and nothing already applied is deleted or recreated.
func TestLeaderFailoverBetweenAgentProcesses(t *testing.T) {
	k := testenv.StartKube(t)
	dyn := k.Dynamic(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	work := t.TempDir()

	bin := filepath.Join(work, "meshrelay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build meshrelay: %v\n%s", err, out)
	}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx,
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "bookinfo"}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A server with the Istio translator and the example policies.
	policies := filepath.Join(work, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	traffic := `apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata: {name: reviews-split, namespace: bookinfo}
spec:
  destinationSelectors: [{namespaces: [bookinfo], names: [reviews]}]
  http:
  - route:
    - service: {cluster: east, namespace: bookinfo, name: reviews, port: 9080}
      subset: {version: v1}
      weight: 50
    - service: {cluster: east, namespace: bookinfo, name: reviews, port: 9080}
      subset: {version: v2}
      weight: 50
`
	writePolicy := func(data string) {
		tmp := filepath.Join(policies, ".tmp")
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(policies, "traffic.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	writePolicy(traffic)
	tr, err := pluginhost.InProcess(istio.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	st := memory.New()
	opts := server.DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", filepath.Join(work, "server")
	srv, err := server.New(ctx, opts, server.Deps{Store: st, Translators: []pluginhost.Translator{tr}, Policies: server.NewDirPolicies(policies, nil)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()

	token, err := pki.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	// Each new leader without the old one's state registers: the token is
	// registered reusable, as `cluster register --reusable` does.
	if err := st.PutCluster(ctx, store.Cluster{Name: "east", TokenHash: pki.HashToken(token), Registered: time.Now(), TokenReusable: true}); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	cluster, err := filepath.Abs(filepath.Join("..", "..", "testdata", "demo", "clusters", "east"))
	if err != nil {
		t.Fatal(err)
	}
	start := func(id string) *exec.Cmd {
		cmd := exec.Command(bin, "agent", "--cluster", "east", "--server", srv.Addr(), "--server-name", "127.0.0.1",
			"--token-file", tokenFile, "--ca-file", srv.CABundlePath(), "--state-dir", filepath.Join(work, id),
			"--source", "dir:"+cluster, "--sink", "kube", "--kubeconfig", k.KubeconfigPath(),
			"--xds-addr", "", "--metrics-addr", "", "--log-format", "text",
			"--leader-elect", "--leader-elect-namespace", "default", "--leader-elect-identity", id,
			"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "200ms")
		log, err := os.Create(filepath.Join(work, id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	holder := func() string {
		l, err := dyn.Resource(leaseGVR).Namespace("default").Get(ctx, "meshrelay-agent", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		h, _, _ := unstructured.NestedString(l.Object, "spec", "holderIdentity")
		return h
	}
	owned := func() map[string]string {
		list, err := dyn.Resource(vsGVR).Namespace("bookinfo").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=meshrelay"})
		if err != nil {
			t.Fatal(err)
		}
		uids := map[string]string{}
		for _, item := range list.Items {
			uids[item.GetName()] = string(item.GetUID())
		}
		return uids
	}
	dump := func() {
		for _, id := range []string{"a", "b"} {
			data, _ := os.ReadFile(filepath.Join(work, id+".log"))
			t.Logf("agent %s log:\n%s", id, data)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			dump()
		}
	})

	a := start("a")
	testutil.Eventually(t, "agent a to lead", func() bool { return holder() == "a" })
	testutil.Eventually(t, "the leader to apply VirtualServices", func() bool { return len(owned()) > 0 })
	before := owned()
	start("b")
	// A follower does nothing but wait for the lease: it has not even
	// registered with the server.
	bCert := filepath.Join(work, "b", "tls.crt")
	if _, err := os.Stat(bCert); err == nil || holder() != "a" {
		t.Fatalf("follower b registered (or took the lease from %q) while a was alive", holder())
	}

	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "agent b to take over", func() bool { return holder() == "b" })
	testutil.Eventually(t, "the new leader to register", func() bool { _, err := os.Stat(bCert); return err == nil })

	// b applies what changes next.
	writePolicy(strings.Replace(strings.Replace(traffic, "weight: 50", "weight: 40", 1), "weight: 50", "weight: 60", 1))
	testutil.Eventually(t, "b to apply the edited weights", func() bool {
		list, err := dyn.Resource(vsGVR).Namespace("bookinfo").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, item := range list.Items {
			http, _, _ := unstructured.NestedSlice(item.Object, "spec", "http")
			for _, h := range http {
				route, _, _ := unstructured.NestedSlice(h.(map[string]any), "route")
				for _, r := range route {
					if w, _, _ := unstructured.NestedInt64(r.(map[string]any), "weight"); w == 40 {
						return true
					}
				}
			}
		}
		return false
	})
	after := owned()
	for name, uid := range before {
		if after[name] != uid {
			dump()
			t.Errorf("VirtualService %s was deleted or recreated across the failover (uid %s → %q)", name, uid, after[name])
		}
	}
}
