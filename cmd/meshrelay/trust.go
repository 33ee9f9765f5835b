package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/agent/trust"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// printTrust prints each MeshTrust's phase and roots, and each cluster's
// mesh root fingerprint and intermediate expiry.
func printTrust(w io.Writer, trust []*relayv1.MeshTrustStatus) error {
	if len(trust) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "MESH TRUST", "CLUSTER", "PHASE", "ROOT", "INTERMEDIATE EXPIRES", "BOUNCED", "PENDING", "PROBLEM")
	for _, m := range trust {
		name := m.GetNamespace() + "/" + m.GetName()
		roots := "-"
		for i, r := range m.GetRoots() {
			if i == 0 {
				roots = short(r)
			} else {
				roots += "," + short(r)
			}
		}
		t.row(name, "*", m.GetPhase(), roots, "", "", "", "")
		for _, c := range m.GetClusters() {
			expires := "-"
			if c.GetIntermediateNotAfter() != nil {
				expires = c.GetIntermediateNotAfter().AsTime().UTC().Format(time.RFC3339)
			}
			t.row("", c.GetCluster(), c.GetPhase(), short(c.GetIssuerRoot()), expires,
				fmt.Sprint(c.GetBounced()), fmt.Sprint(c.GetPending()), dash(c.GetError()))
		}
	}
	return t.flush()
}

// short abbreviates a SHA-256 fingerprint.
func short(fp string) string {
	if len(fp) > 16 {
		return fp[:16]
	}
	return dash(fp)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// newTrustManager builds the agent's mesh trust manager: on the cluster
// with a kube sink, else in the first dir sink's mesh-trust directory.
func newTrustManager(cfg *rest.Config, f agentFlags, cluster string, a *agent.Agent, logger *slog.Logger) (*trust.Manager, error) {
	opts := trust.Options{Cluster: cluster, Interval: f.trustEvery}
	if slices.Contains(f.sinks, "kube") {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("mesh trust: %w", err)
		}
		return trust.New(opts, a.TrustClient(), trust.KubeSecrets{Client: cs}, cs, logger), nil
	}
	for _, s := range f.sinks {
		if dir, ok := strings.CutPrefix(s, "dir:"); ok {
			return trust.New(opts, a.TrustClient(), trust.DirSecrets{Dir: filepath.Join(dir, "mesh-trust")}, nil, logger), nil
		}
	}
	return nil, errors.New("--mesh-trust needs a kube or dir sink")
}
