package testenv_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/meshrelay/meshrelay/internal/testenv"
)

var (
	namespaceGVR      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	virtualServiceGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}
	cnpGVR            = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}
	ccnpGVR           = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumclusterwidenetworkpolicies"}
	cecGVR            = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumenvoyconfigs"}
)

// object parses a YAML manifest.
func object(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("parse manifest: %v\n%s", err, manifest)
	}
	return u
}

func TestKubeNamespace(t *testing.T) {
	k := testenv.SharedKube(t)
	ns := k.CreateNamespace(t)
	got, err := k.Dynamic(t).Resource(namespaceGVR).Get(t.Context(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get namespace %s: %v", ns, err)
	}
	if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "Active" {
		t.Errorf("namespace %s phase = %q, want Active", ns, phase)
	}
}

func TestKubeconfig(t *testing.T) {
	k := testenv.SharedKube(t)
	b, err := os.ReadFile(k.KubeconfigPath())
	if err != nil {
		t.Fatalf("read kubeconfig: %v", err)
	}
	cfg := k.Config()
	for _, want := range []string{"server: " + cfg.Host, "token: " + cfg.BearerToken, "certificate-authority-data: "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("kubeconfig lacks %q:\n%s", want, b)
		}
	}
}

func TestIstioVirtualService(t *testing.T) {
	k := testenv.SharedKube(t)
	ns := k.CreateNamespace(t)
	vs := k.Dynamic(t).Resource(virtualServiceGVR).Namespace(ns)

	valid := object(t, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts: [reviews]
  http:
  - match:
    - headers:
        end-user: {exact: jason}
    route:
    - destination: {host: reviews, subset: v2}
  - timeout: 5s
    route:
    - destination: {host: reviews, subset: v1}
`)
	if _, err := vs.Create(t.Context(), valid, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create valid VirtualService: %v", err)
	}

	tests := map[string]struct {
		manifest string
		wantMsg  string
	}{
		// Rejected by a CEL rule of the CRD.
		"timeout below 1ms": {
			manifest: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: short-timeout
spec:
  hosts: [reviews]
  http:
  - timeout: 100us
    route:
    - destination: {host: reviews}
`,
			wantMsg: "must be a valid duration greater than 1ms",
		},
		// Rejected by the CRD's OpenAPI schema.
		"hosts not a list": {
			manifest: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: bad-hosts
spec:
  hosts: reviews
`,
			wantMsg: "spec.hosts",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := vs.Create(t.Context(), object(t, tc.manifest), metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create invalid VirtualService: error %v, want Invalid", err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("create invalid VirtualService: error %q, want it to mention %q", err, tc.wantMsg)
			}
		})
	}
}

func TestCiliumPolicies(t *testing.T) {
	k := testenv.SharedKube(t)
	ns := k.CreateNamespace(t)
	dyn := k.Dynamic(t)

	cnp := object(t, `
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata:
  name: rule1
spec:
  description: L7 policy to restrict access to specific HTTP call
  endpointSelector:
    matchLabels: {org: empire, class: deathstar}
  ingress:
  - fromEndpoints:
    - matchLabels: {org: empire}
    toPorts:
    - ports:
      - {port: "80", protocol: TCP}
      rules:
        http:
        - {method: POST, path: /v1/request-landing}
`)
	if _, err := dyn.Resource(cnpGVR).Namespace(ns).Create(t.Context(), cnp, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CiliumNetworkPolicy: %v", err)
	}

	ccnp := object(t, `
apiVersion: cilium.io/v2
kind: CiliumClusterwideNetworkPolicy
metadata:
  name: `+ns+`-deny-all
spec:
  endpointSelector: {}
  ingress:
  - {}
`)
	if _, err := dyn.Resource(ccnpGVR).Create(t.Context(), ccnp, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CiliumClusterwideNetworkPolicy: %v", err)
	}

	cec := object(t, `
apiVersion: cilium.io/v2
kind: CiliumEnvoyConfig
metadata:
  name: envoy-lb-listener
spec:
  services:
  - {name: echo-service, namespace: default}
  resources:
  - "@type": type.googleapis.com/envoy.config.listener.v3.Listener
    name: envoy-lb-listener
`)
	if _, err := dyn.Resource(cecGVR).Namespace(ns).Create(t.Context(), cec, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CiliumEnvoyConfig: %v", err)
	}

	bad := object(t, `
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata:
  name: bad-port
spec:
  endpointSelector: {}
  ingress:
  - toPorts:
    - ports:
      - {port: "80", protocol: NOT-A-PROTOCOL}
`)
	_, err := dyn.Resource(cnpGVR).Namespace(ns).Create(t.Context(), bad, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("create CiliumNetworkPolicy with an unknown protocol: error %v, want Invalid", err)
	}
}

// TestKubeMissingCRDThenInstalled starts its own API server without CRDs,
// which also covers StartKube and Stop.
func TestKubeMissingCRDThenInstalled(t *testing.T) {
	k := testenv.StartKube(t, testenv.KubeCRDs())
	ns := k.CreateNamespace(t)
	vs := k.Dynamic(t).Resource(virtualServiceGVR).Namespace(ns)
	obj := object(t, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts: [reviews]
`)
	if _, err := vs.Create(t.Context(), obj, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("create VirtualService without its CRD: error %v, want NotFound", err)
	}

	k.InstallCRDs(t, testenv.IstioCRDs)
	k.InstallCRDs(t, testenv.IstioCRDs) // installing again is harmless
	if _, err := vs.Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VirtualService after installing its CRD: %v", err)
	}

	k.Stop()
	if err := readyz(context.Background(), k.Config()); err == nil {
		t.Fatal("/readyz after Stop succeeded, want an error")
	}
}

func readyz(ctx context.Context, cfg *rest.Config) error {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
