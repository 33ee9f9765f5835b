package server

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// A root brought from files signs the clusters' intermediates; replacing
// the files rotates the fleet to the new root in phases.
func TestMeshTrustRootFromFiles(t *testing.T) {
	dir := t.TempDir()
	saveRoot := func() string {
		ca, err := pki.GenerateMeshRoot("Example Corp mesh root", 48*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := ca.Save(dir); err != nil {
			t.Fatal(err)
		}
		return pki.Fingerprint(ca.Certificate())
	}
	first := saveRoot()
	files := fmt.Sprintf("  root: {files: {certFile: %q, keyFile: %q}}", filepath.Join(dir, pki.CACertFile), filepath.Join(dir, pki.CAKeyFile))
	pols := &memPolicies{}
	ts := startServerDeps(t, nil, "", withPolicies(pols))
	east := startTrustCluster(t, ts, "east")
	pols.set(t, meshTrustYAML([]string{"east"}, files))
	testutil.Eventually(t, "east under the brought root", func() bool {
		_ = east.step(t)
		s := east.secret(t)
		return s != nil && slices.Equal(rootsOf(t, s), []string{first})
	})

	second := saveRoot()
	testutil.Eventually(t, "the rotation to the new files", func() bool {
		_ = east.step(t)
		s := east.secret(t)
		ms := trustStatus(t, ts)
		return s != nil && ms.GetPhase() == policyv1alpha1.TrustPhaseActive && slices.Equal(rootsOf(t, s), []string{second})
	})
	if err := verifiesAgainst(t, east.secret(t), east.secret(t)); err != nil {
		t.Fatal(err)
	}
}

// A MeshTrust in a real management cluster, its root in a Secret there:
// the status written back carries the phase, the root and each cluster's
// trust, through the CRD's schema.
func TestMeshTrustKubeStatusAndSecretRoot(t *testing.T) {
	k := testenv.StartKube(t)
	k.InstallCRDs(t, "deploy/crds")
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshrelay"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root, err := pki.GenerateMeshRoot("Example Corp mesh root", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := root.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	certs, key := splitPEM(keyPEM)
	if _, err := cs.CoreV1().Secrets("meshrelay").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "mesh-root"}, Data: map[string][]byte{"tls.crt": certs, "tls.key": key},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(meshTrustYAML([]string{"east"}, "  root: {secret: {namespace: meshrelay, name: mesh-root}}")), &obj); err != nil {
		t.Fatal(err)
	}
	gvr := policyKinds[policyv1alpha1.KindMeshTrust]
	dyn := k.Dynamic(t)
	if _, err := dyn.Resource(gvr).Namespace("meshrelay").Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kp, err := NewKubePolicies(k.Config(), discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	ts := startServerDeps(t, nil, "", withPolicies(kp))
	east := startTrustCluster(t, ts, "east")
	want := pki.Fingerprint(root.Certificate())
	testutil.Eventually(t, "the MeshTrust's status in the management cluster", func() bool {
		_ = east.step(t)
		u, err := dyn.Resource(gvr).Namespace("meshrelay").Get(ctx, "fleet", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		roots, _, _ := unstructured.NestedStringSlice(u.Object, "status", "roots")
		state, _, _ := unstructured.NestedString(u.Object, "status", "state")
		meshes, _, _ := unstructured.NestedSlice(u.Object, "status", "meshes")
		if phase != policyv1alpha1.TrustPhaseActive || !slices.Equal(roots, []string{want}) || state != "Accepted" || len(meshes) != 1 {
			return false
		}
		m := meshes[0].(map[string]any)
		return m["cluster"] == "east" && m["phase"] == policyv1alpha1.TrustPhaseActive && m["issuerRoot"] == want && m["intermediateExpiry"] != nil
	})
}
