package discovery

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
)

// trustAnchor returns a self-signed CA certificate as PEM and its SHA-256
// fingerprint.
func trustAnchor(t *testing.T) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "root.linkerd.cluster.local"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(0, 0).Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), hex.EncodeToString(sum[:])
}

func TestComputeLinkerd(t *testing.T) {
	dest := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"linkerd-destination","namespace":"linkerd"},
	  "spec":{"template":{"spec":{"containers":[{"name":"linkerd-proxy","image":"cr.l5d.io/linkerd/proxy:edge-25.8.1"},
	    {"name":"destination","image":"cr.l5d.io/linkerd/controller:edge-25.8.1","args":["destination","-addr=:8086","-identity-trust-domain=east.example"]}]}}}}`
	labelled := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"dst","namespace":"l5d","labels":{"linkerd.io/control-plane-component":"destination"}},
	  "spec":{"template":{"spec":{"containers":[{"name":"destination","image":"cr.l5d.io/linkerd/controller:stable-2.14.10"}]}}}}`
	config := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"linkerd-config","namespace":"linkerd"},
	  "data":{"values":"identityTrustDomain: corp.example\nclusterDomain: cluster.local\n"}}`
	pemA, fpA := trustAnchor(t)
	pemB, fpB := trustAnchor(t)
	roots, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "linkerd-identity-trust-roots", "namespace": "linkerd"},
		"data":     map[string]any{"ca-bundle.crt": pemB + pemA + pemA}})
	link := `{"apiVersion":"multicluster.linkerd.io/v1alpha3","kind":"Link","metadata":{"name":"west","namespace":"linkerd-multicluster"},"spec":{"targetClusterName":"west"}}`
	mirror := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"linkerd-service-mirror-north","namespace":"linkerd-multicluster","labels":{"mirror.linkerd.io/cluster-name":"north"}}}`
	gateway := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"linkerd-gateway","namespace":"linkerd-multicluster"}}`
	notLinkerd := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"reviews","namespace":"bookinfo","annotations":{"linkerd.io/inject":"enabled"}}}`

	fingerprints := []string{fpA, fpB}
	if fpB < fpA {
		fingerprints = []string{fpB, fpA}
	}
	tests := map[string]struct {
		objs []string
		want *discoveryv1alpha1.MeshSpec
	}{
		"injected workload only": {objs: []string{notLinkerd, gateway}},
		"destination, trust domain from its args": {
			objs: []string{dest, notLinkerd},
			want: &discoveryv1alpha1.MeshSpec{Type: "linkerd", Namespace: "linkerd", Version: "edge-25.8.1", TrustDomain: "east.example"},
		},
		"destination by label, default trust domain": {
			objs: []string{labelled},
			want: &discoveryv1alpha1.MeshSpec{Type: "linkerd", Namespace: "l5d", Version: "stable-2.14.10", TrustDomain: "cluster.local"},
		},
		"config, trust anchors and multicluster": {
			objs: []string{dest, config, string(roots), link, mirror, gateway},
			want: &discoveryv1alpha1.MeshSpec{Type: "linkerd", Namespace: "linkerd", Version: "edge-25.8.1", TrustDomain: "corp.example",
				TrustAnchors: fingerprints, Multicluster: true, LinkedClusters: []string{"north", "west"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got *discoveryv1alpha1.MeshSpec
			for _, r := range Compute(mustResources(t, tc.objs...)) {
				var m discoveryv1alpha1.Mesh
				if r.ID.Kind != "Mesh" || json.Unmarshal(r.Body, &m) != nil || m.Spec.Type != "linkerd" {
					continue
				}
				got = &m.Spec
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Compute() Linkerd mesh (-want +got):\n%s", diff)
			}
		})
	}
}
