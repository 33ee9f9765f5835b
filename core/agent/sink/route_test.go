package sink

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/internal/testenv"
)

// The agent's sinks route by API group: the kube sink applies a backend's
// Kubernetes objects and is never handed its xDS resources (no cluster
// serves them), while a directory sink writes both. Without a sink that
// takes them, the xDS resources fail with agent.ErrNoSink.
func TestKubeSinkSkipsXDSResources(t *testing.T) {
	k := testenv.SharedKube(t)
	dyn := k.Dynamic(t)
	ns := k.CreateNamespace(t)
	kube := newSink(t, k, KubeOptions{})
	files := t.TempDir()
	cm := configMap(t, ns, "acme", "a")
	listener := res(t, `apiVersion: xds.meshrelay.io/v1alpha1
kind: Listener
metadata: {name: acme.test, namespace: frontend}
spec: {resource: {"@type": type.googleapis.com/envoy.config.listener.v3.Listener, name: acme.test}}
`)
	desired := snap(t, cm, listener)

	errs, err := agent.Sinks{kube, NewDir(files)}.Apply(context.Background(), "acme", desired, true)
	if err != nil || len(errs) != 0 {
		t.Fatalf("Apply(kube, dir) = %v, %v; want no errors", errs, err)
	}
	if get(t, dyn, cmGVR, ns, "acme") == nil {
		t.Errorf("the kube sink did not apply %s", cm.ID)
	}
	written, err := filepath.Glob(filepath.Join(files, "acme", "*.yaml"))
	if err != nil || len(written) != 2 {
		t.Errorf("the dir sink wrote %v, want both resources", written)
	}

	errs, err = agent.Sinks{kube}.Apply(context.Background(), "acme", desired, true)
	if err != nil || len(errs) != 1 || !errors.Is(errs[listener.ID], agent.ErrNoSink) {
		t.Errorf("Apply(kube) = %v, %v; want only %s failing with ErrNoSink", errs, err, listener.ID)
	}
}
