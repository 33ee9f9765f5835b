package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/core/agent/sink"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// TestNetworkPolicyPrunedAfterAgentRestart: NetworkPolicy is a kind core
// never names. An agent applies the plugin's NetworkPolicy to a real
// cluster and stops; the policy is deleted while it is away; the agent
// started again with the same state directory prunes the NetworkPolicy,
// though it applied nothing of that kind since it started: it knows the
// kind from the plugin's declaration. With --targets all the server keeps
// computing east while its agent is away; with --targets connected it
// computes east afresh when the agent is back, finds the output empty, and
// sends it empty all the same, since the store holds the one delivered
// before.
func TestNetworkPolicyPrunedAfterAgentRestart(t *testing.T) {
	k := testenv.StartKube(t)
	dyn := k.Dynamic(t)
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(t.Context(),
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "shop"}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, targets := range []string{server.TargetsConnected, server.TargetsAll} {
		t.Run(targets, func(t *testing.T) { prunedAfterRestart(t, k, targets) })
	}
}

func prunedAfterRestart(t *testing.T, k *testenv.Kube, targets string) {
	dyn := k.Dynamic(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	work := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr, err := pluginhost.InProcess(&Translator{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	srv, st, policyFile := startServer(ctx, t, work, []pluginhost.Translator{tr}, func(o *server.Options) { o.Targets = targets })

	tokenFile := filepath.Join(work, "east.token")
	if err := os.WriteFile(tokenFile, []byte(register(t, st, "east")), 0o600); err != nil {
		t.Fatal(err)
	}
	npGVR := schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
	owned := func() int {
		list, err := dyn.Resource(npGVR).Namespace("shop").List(ctx, metav1.ListOptions{LabelSelector: sink.ManagedByLabel + "=" + sink.ManagedByValue})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	// startAgent runs an agent process's worth of parts: a fresh kube sink
	// and agent over the same state directory.
	startAgent := func() (*agent.Agent, func()) {
		kube, err := sink.NewKube(k.Config(), sink.KubeOptions{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		aopts := agent.DefaultOptions()
		aopts.Cluster, aopts.Server, aopts.ServerName = "east", srv.Addr(), "127.0.0.1"
		aopts.TokenFile, aopts.CAFile, aopts.StateDir = tokenFile, srv.CABundlePath(), filepath.Join(work, "agent")
		a, err := agent.New(aopts, discovery.NewDir(filepath.Join("testdata", "east"), discovery.DirOptions{}), agent.Sinks{kube}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		actx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(actx) }()
		return a, func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("agent Run() = %v", err)
			}
		}
	}
	first, stop := startAgent()
	testutil.Eventually(t, "the NetworkPolicy to be applied", func() bool { return owned() == 1 })
	if got := first.OutputKinds(Backend); !slices.Equal(got, []string{"networking.k8s.io/NetworkPolicy"}) {
		t.Errorf("the agent was told output kinds %v, want the plugin's declaration", got)
	}
	stop()

	if err := os.Remove(policyFile); err != nil {
		t.Fatal(err)
	}
	if targets == server.TargetsAll {
		testutil.Eventually(t, "the server to drop the NetworkPolicy from east's outputs", func() bool {
			resp, err := srv.List(ctx, &relayv1.ListRequest{Kind: server.KindOutputs, Cluster: "east", Backend: Backend})
			return err == nil && len(resp.GetOutputs()) == 0
		})
	} else {
		testutil.Eventually(t, "the server to read the policy's removal", func() bool {
			resp, err := srv.List(ctx, &relayv1.ListRequest{Kind: server.KindPolicies})
			return err == nil && len(resp.GetPolicies()) == 0
		})
	}
	if owned() != 1 {
		t.Fatal("the NetworkPolicy went away while no agent ran")
	}

	_, stop = startAgent()
	defer stop()
	testutil.Eventually(t, "the restarted agent to prune the NetworkPolicy", func() bool { return owned() == 0 })
}
