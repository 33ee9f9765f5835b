package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Paths of the CRD sets that StartKube installs by default, relative to the
// repository root.
const (
	// IstioCRDs holds every Istio CRD (networking, security, telemetry and
	// extensions.istio.io).
	IstioCRDs = "testdata/crds/istio"
	// CiliumCRDs holds CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy
	// and CiliumEnvoyConfig.
	CiliumCRDs = "testdata/crds/cilium"
	// GatewayAPICRDs holds the Gateway API's standard-channel HTTPRoute and
	// GRPCRoute, with their CEL validation rules; StartKube installs them
	// only when asked (KubeCRDs).
	GatewayAPICRDs = "testdata/crds/gatewayapi"
	// LinkerdCRDs holds Linkerd's policy.linkerd.io CRDs (Server,
	// AuthorizationPolicy, MeshTLSAuthentication, NetworkAuthentication,
	// HTTPRoute); StartKube installs them only when asked (KubeCRDs).
	LinkerdCRDs = "testdata/crds/linkerd"
)

const etcdHint = installHint + ", which installs the Debian package etcd-server"

const (
	// etcdReadyTimeout bounds how long etcd may take to report healthy.
	etcdReadyTimeout = 30 * time.Second
	// apiserverReadyTimeout bounds how long kube-apiserver may take to pass
	// /readyz; it is ready in a few seconds on an idle machine.
	apiserverReadyTimeout = 90 * time.Second
	// startAttempts is how many times a server is started on fresh ports
	// before giving up, in case another process took a port first.
	startAttempts = 3
)

// serviceAccountIssuer is the issuer of the service account tokens the API
// server signs.
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// KubeOption configures StartKube and SharedKube.
type KubeOption func(*kubeOptions)

type kubeOptions struct {
	crds    []string
	crdsSet bool
	args    []string
}

// KubeCRDs replaces the CRDs installed at start (IstioCRDs and CiliumCRDs)
// with the files or directories given; KubeCRDs() installs none, for tests of
// a CRD that is missing and installed later with InstallCRDs.
func KubeCRDs(paths ...string) KubeOption {
	return func(o *kubeOptions) {
		o.crds = append([]string(nil), paths...)
		o.crdsSet = true
	}
}

// KubeAPIServerArgs passes extra flags to kube-apiserver, such as
// "--feature-gates=...". A flag given here overrides the default one.
func KubeAPIServerArgs(args ...string) KubeOption {
	return func(o *kubeOptions) { o.args = append(o.args, args...) }
}

func newKubeOptions(opts []KubeOption) kubeOptions {
	o := kubeOptions{crds: []string{IstioCRDs, CiliumCRDs}}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Kube is a kube-apiserver backed by its own etcd, started by StartKube or
// SharedKube.
type Kube struct {
	dir        string
	config     *rest.Config
	kubeconfig string
	etcd       *process
	apiserver  *process
	stopOnce   sync.Once
}

// StartKube starts etcd and kube-apiserver on free 127.0.0.1 ports, waits
// until the API server is ready, writes a kubeconfig, and installs the Istio
// and Cilium CRDs (see KubeCRDs), waiting until they are established. The
// servers are stopped when the test ends.
//
// If etcd or bin/kube-apiserver is missing the test is skipped, or fails
// when Required.
func StartKube(t testing.TB, opts ...KubeOption) *Kube {
	t.Helper()
	o := newKubeOptions(opts)
	dir := t.TempDir()
	dumpLogOnFailure(t, "kube-apiserver", filepath.Join(dir, "kube-apiserver.log"))
	dumpLogOnFailure(t, "etcd", filepath.Join(dir, "etcd.log"))
	k, err := startKube(dir, o)
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(k.Stop)
	if len(o.crds) > 0 {
		k.InstallCRDs(t, o.crds...)
	}
	return k
}

// startKube starts etcd and kube-apiserver keeping everything in dir. On
// error nothing is left running.
func startKube(dir string, o kubeOptions) (_ *Kube, err error) {
	etcdBin, err := lookPath("MESHRELAY_ETCD", "etcd", etcdHint)
	if err != nil {
		return nil, err
	}
	apiserverBin, err := kubeAPIServerPath()
	if err != nil {
		return nil, err
	}
	k := &Kube{dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig")}
	defer func() {
		if err != nil {
			k.Stop()
		}
	}()

	etcdURL, err := k.startEtcd(etcdBin)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	if err := k.startAPIServer(apiserverBin, etcdURL, o.args); err != nil {
		return nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	if err := writeKubeconfig(k.kubeconfig, k.config); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return k, nil
}

// startEtcd starts a single-member etcd and returns its client URL.
func (k *Kube) startEtcd(binary string) (string, error) {
	logPath := filepath.Join(k.dir, "etcd.log")
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		clientPort, err := freePort()
		if err != nil {
			return "", err
		}
		peerPort, err := freePort()
		if err != nil {
			return "", err
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		p, err := startProcess("etcd", logPath, binary,
			"--name", "testenv",
			"--data-dir", filepath.Join(k.dir, "etcd-"+strconv.Itoa(attempt)),
			"--listen-client-urls", clientURL,
			"--advertise-client-urls", clientURL,
			"--listen-peer-urls", peerURL,
			"--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "testenv="+peerURL,
			"--initial-cluster-state", "new",
			"--logger", "zap",
			"--log-level", "warn",
		)
		if err != nil {
			return "", err
		}
		lastErr = p.waitReady(etcdReadyTimeout, func() error { return etcdHealthy(clientURL) })
		if lastErr == nil {
			k.etcd = p
			return clientURL, nil
		}
		p.kill()
	}
	return "", lastErr
}

// etcdHealthy checks etcd's /health endpoint.
func etcdHealthy(clientURL string) error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(clientURL + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"true"`) {
		return fmt.Errorf("etcd /health: %s %s", resp.Status, body)
	}
	return nil
}

// startAPIServer writes the API server's credentials and starts it against
// the etcd at etcdURL, then waits for /readyz.
func (k *Kube) startAPIServer(binary, etcdURL string, extra []string) error {
	token, err := randomHex(16)
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(k.dir, "tokens.csv")
	// token,user,uid,"groups": system:masters is allowed everything by RBAC.
	line := token + `,testenv-admin,testenv-admin,"system:masters"` + "\n"
	if err := os.WriteFile(tokenFile, []byte(line), 0o600); err != nil {
		return err
	}
	saKey := filepath.Join(k.dir, "service-account.key")
	if err := writeECKey(saKey); err != nil {
		return err
	}
	certDir := filepath.Join(k.dir, "certs")
	logPath := filepath.Join(k.dir, "kube-apiserver.log")

	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		host := "https://127.0.0.1:" + strconv.Itoa(port)
		args := []string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + certDir,
			"--service-account-issuer=" + serviceAccountIssuer,
			"--service-account-key-file=" + saKey,
			"--service-account-signing-key-file=" + saKey,
			"--token-auth-file=" + tokenFile,
			"--authorization-mode=RBAC",
			"--service-cluster-ip-range=10.96.0.0/16",
			// No controller creates the "default" ServiceAccount, so let
			// Pods be created without one.
			"--disable-admission-plugins=ServiceAccount",
			// The "kubernetes" Service cannot have loopback endpoints, and
			// nothing in the cluster needs them.
			"--endpoint-reconciler-type=none",
			"--allow-privileged=true",
			"--profiling=false",
		}
		args = append(args, extra...)
		p, err := startProcess("kube-apiserver", logPath, binary, args...)
		if err != nil {
			return err
		}
		var cfg *rest.Config
		lastErr = p.waitReady(apiserverReadyTimeout, func() error {
			if cfg == nil {
				c, err := restConfig(host, token, certDir)
				if err != nil {
					return err
				}
				cfg = c
			}
			return apiserverReady(cfg)
		})
		if lastErr == nil {
			k.apiserver = p
			k.config = cfg
			return nil
		}
		p.kill()
	}
	return lastErr
}

// restConfig returns a client configuration for the API server at host that
// trusts the self-signed certificate the server wrote to certDir.
func restConfig(host, token, certDir string) (*rest.Config, error) {
	ca, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		QPS:             200,
		Burst:           400,
		Timeout:         30 * time.Second,
	}, nil
}

// apiserverReady checks the API server's /readyz endpoint.
func apiserverReady(cfg *rest.Config) error {
	c := rest.CopyConfig(cfg)
	c.Timeout = 2 * time.Second
	client, err := rest.HTTPClientFor(c)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	resp, err := client.Get(c.Host + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, body)
	}
	return nil
}

// writeECKey writes a new P-256 private key to path, used both to sign and
// to verify service account tokens.
func writeECKey(path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate service account key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal service account key: %w", err)
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// writeKubeconfig writes a kubeconfig for cfg to path.
func writeKubeconfig(path string, cfg *rest.Config) error {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: testenv-admin
  user:
    token: %s
contexts:
- name: testenv
  context:
    cluster: testenv
    user: testenv-admin
current-context: testenv
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), cfg.BearerToken)
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Config returns a copy of the client configuration for the API server. Its
// bearer token belongs to the system:masters group.
func (k *Kube) Config() *rest.Config {
	return rest.CopyConfig(k.config)
}

// KubeconfigPath returns the path of a kubeconfig file for the API server,
// for code and tools that take one (KUBECONFIG, --kubeconfig).
func (k *Kube) KubeconfigPath() string {
	return k.kubeconfig
}

// Dynamic returns a dynamic client for the API server.
func (k *Kube) Dynamic(t testing.TB) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(k.Config())
	if err != nil {
		t.Fatalf("testenv: dynamic client: %v", err)
	}
	return c
}

// Stop kills kube-apiserver and etcd. Clients see connection errors
// afterwards. Stop is safe to call more than once.
func (k *Kube) Stop() {
	k.stopOnce.Do(func() {
		if k.apiserver != nil {
			k.apiserver.kill()
		}
		if k.etcd != nil {
			k.etcd.kill()
		}
	})
}

// namespaceGVR identifies core/v1 Namespaces for the dynamic client.
var namespaceGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// CreateNamespace creates a Namespace with a unique name derived from the
// test's name and returns the name, so that tests sharing an API server do
// not see each other's objects. The Namespace is not deleted: without a
// namespace controller it would stay Terminating anyway.
func (k *Kube) CreateNamespace(t testing.TB) string {
	t.Helper()
	suffix, err := randomHex(3)
	if err != nil {
		t.Fatalf("testenv: create namespace: %v", err)
	}
	name := namespaceName(t.Name(), suffix)
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Namespace",
		"metadata":   map[string]any{"name": name},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := k.Dynamic(t).Resource(namespaceGVR).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("testenv: create namespace %s: %v", name, err)
	}
	return name
}

// namespaceName turns a test name into a valid DNS label ending in suffix.
func namespaceName(testName, suffix string) string {
	var b strings.Builder
	dash := true
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	base := strings.Trim(b.String(), "-")
	if max := 63 - len(suffix) - 1; len(base) > max {
		base = strings.TrimRight(base[:max], "-")
	}
	if base == "" {
		return "test-" + suffix
	}
	return base + "-" + suffix
}
