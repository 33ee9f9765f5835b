// Package deploy_test checks the Helm charts in deploy/charts and the
// Dockerfiles in deploy/docker: helm lint and helm template pass, values that
// cannot work are refused, the server chart's CRDs are the generated ones in
// deploy/crds, every rendered object is accepted by a real kube-apiserver
// (server-side apply, dry run), and the charts' RBAC is least privilege, both
// as written and as the API server's authorizer answers SubjectAccessReviews.
//
// Helm is bin/helm, installed by `bash hack/helm.sh` (MESHRELAY_HELM
// overrides the path). Without it the tests are skipped, or fail when CI=true
// or MESHRELAY_REQUIRE_TESTENV=1, like the servers of internal/testenv.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	serverChart = "deploy/charts/meshrelay-server"
	agentChart  = "deploy/charts/meshrelay-agent"
	// agentCIValues holds the agent chart's required values.
	agentCIValues = "deploy/charts/meshrelay-agent/ci/test-values.yaml"
	// generatedCRDs are the generated policy.meshrelay.io and
	// discovery.meshrelay.io CRDs.
	generatedCRDs = "deploy/crds/*.yaml"
)

// renderCase is one set of values a chart is linted, rendered and applied
// with.
type renderCase struct {
	chart string
	// valuesFiles and set are passed as --values and --set.
	valuesFiles []string
	set         []string
}

// renderCases cover each chart's defaults and the values that change which
// objects are rendered.
var renderCases = map[string]renderCase{
	"server/defaults": {chart: serverChart},
	"server/ha-redis": {chart: serverChart, set: []string{
		"replicaCount=3",
		"store.type=redis",
		"redis.address=redis.meshrelay.svc:6379",
		"redis.db=2",
		"redis.prefix=fleet-a:",
		"redis.passwordSecret.name=redis-auth",
		"ca.existingSecret=meshrelay-ca",
		"ca.chainKey=ca.crt",
		"adminToken.existingSecret=meshrelay-admin",
		"caKeyEncryptionKey.existingSecret=meshrelay-ca-key-encryption-key",
		"service.type=LoadBalancer",
		"service.loadBalancerSourceRanges={10.0.0.0/8}",
		"extraSANs={meshrelay.example.com}",
		"safeStartWindow=5m",
	}},
	"server/persistent-dir-source": {chart: serverChart, set: []string{
		"persistence.enabled=true",
		"configSource=dir:/etc/meshrelay/policies",
		"plugins.names={istio}",
		"mode=tls",
	}},
	"server/discovery-crds": {chart: serverChart, set: []string{"discoveryCRDs=true"}},
	"agent/defaults":        {chart: agentChart, valuesFiles: []string{agentCIValues}},
	"agent/single-existing-secret": {chart: agentChart, set: []string{
		"cluster=west",
		"server.address=meshrelay.example.com:9900",
		"server.serverName=meshrelay.example.com",
		"relay.existingSecret=meshrelay-relay",
		"replicaCount=1",
		"leaderElection.enabled=false",
		"xds.enabled=false",
		"discovery.excludeNamespaces={kube-system,kube-public}",
	}},
}

// helmPath returns bin/helm, skipping the test when it is missing unless
// testenv.Required, in which case the test fails.
func helmPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv("MESHRELAY_HELM")
	if path == "" {
		path = filepath.Join(repoRoot(t), "bin", "helm")
	}
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("helm not found at %s: run `bash hack/helm.sh` to install it", path)
		if testenv.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg + " (set CI=true or MESHRELAY_REQUIRE_TESTENV=1 to fail instead)")
	}
	return path
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// runHelm runs helm with args in the repository root and returns its
// standard output; the error includes its standard error.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmPath(t), args...)
	cmd.Dir = repoRoot(t)
	// Keep helm away from the user's kubeconfig, repositories and caches.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// valueArgs returns the --values and --set flags of c.
func (c renderCase) valueArgs() []string {
	var args []string
	for _, f := range c.valuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range c.set {
		args = append(args, "--set", s)
	}
	return args
}

// render runs helm template for c as release "meshrelay" into namespace and
// returns the objects.
func render(t *testing.T, c renderCase, namespace string) []*unstructured.Unstructured {
	t.Helper()
	return renderRelease(t, c, "meshrelay", namespace)
}

// renderRelease is render with a release name.
func renderRelease(t *testing.T, c renderCase, release, namespace string) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", release, c.chart, "--namespace", namespace, "--include-crds"}, c.valueArgs()...)
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects(out)
	if err != nil {
		t.Fatalf("helm template %s: %v", c.chart, err)
	}
	if len(objs) == 0 {
		t.Fatalf("helm template %s rendered nothing", c.chart)
	}
	return objs
}

// decodeObjects decodes a multi-document YAML stream, skipping empty
// documents. Numbers become int64 or float64, as from the API server.
func decodeObjects(s string) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		data, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if string(bytes.TrimSpace(data)) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("document %d has no name: %s", i, doc)
		}
		objs = append(objs, u)
	}
}

// find returns the rendered object of kind whose name ends in suffix.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, suffix string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && strings.HasSuffix(o.GetName(), suffix) {
			return o
		}
	}
	t.Fatalf("no %s named *%s rendered", kind, suffix)
	return nil
}

func TestHelmLint(t *testing.T) {
	helmPath(t)
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", c.chart}, c.valueArgs()...)
			if out, err := runHelm(t, args...); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
		})
	}
}

// TestHelmTemplateRefusesInvalidValues checks that values that cannot work
// fail the render with a message saying why, rather than installing a
// broken release.
func TestHelmTemplateRefusesInvalidValues(t *testing.T) {
	helmPath(t)
	tests := map[string]struct {
		chart string
		set   []string
		want  string
	}{
		"server replicas without redis": {
			chart: serverChart, set: []string{"replicaCount=2"},
			want: "replicaCount 2 needs store.type=redis",
		},
		"server redis without address": {
			chart: serverChart, set: []string{"store.type=redis"},
			want: "store.type=redis needs redis.address",
		},
		"server unknown store": {
			chart: serverChart, set: []string{"store.type=etcd"},
			want: "store.type must be memory or redis",
		},
		"server unknown config source": {
			chart: serverChart, set: []string{"configSource=git"},
			want: "configSource must be kube or dir:PATH",
		},
		"server persistence with replicas": {
			chart: serverChart, set: []string{"replicaCount=2", "store.type=redis", "redis.address=redis:6379", "persistence.enabled=true"},
			want: "persistence.enabled with replicaCount > 1",
		},
		"agent without cluster": {
			chart: agentChart, set: []string{"server.address=s:9900", "relay.existingSecret=relay"},
			want: "cluster is required",
		},
		"agent without server": {
			chart: agentChart, set: []string{"cluster=east", "relay.existingSecret=relay"},
			want: "server.address is required",
		},
		"agent without relay identity": {
			chart: agentChart, set: []string{"cluster=east", "server.address=s:9900", "relay.token=t"},
			want: "relay.existingSecret, or relay.token and relay.caBundle, are required",
		},
		"agent replicas without leader election": {
			chart: agentChart, set: []string{"cluster=east", "server.address=s:9900", "relay.existingSecret=relay", "leaderElection.enabled=false"},
			want: "replicaCount 2 needs leaderElection.enabled",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := []string{"template", "meshrelay", tc.chart}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, err := runHelm(t, args...)
			if err == nil {
				t.Fatalf("helm template %s --set %s succeeded, want an error containing %q", tc.chart, strings.Join(tc.set, ","), tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %s --set %s: %v\nwant an error containing %q", tc.chart, strings.Join(tc.set, ","), err, tc.want)
			}
		})
	}
}

// containerArgs returns the args of the named container of a Deployment.
func containerArgs(t *testing.T, deploy *unstructured.Unstructured, name string) []string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		m, _ := c.(map[string]any)
		if m["name"] != name {
			continue
		}
		var args []string
		for _, a := range m["args"].([]any) {
			args = append(args, a.(string))
		}
		return args
	}
	t.Fatalf("Deployment %s has no container %q", deploy.GetName(), name)
	return nil
}

func TestServerRender(t *testing.T) {
	helmPath(t)
	t.Run("defaults", func(t *testing.T) {
		objs := render(t, renderCases["server/defaults"], "mr")
		d := find(t, objs, "Deployment", "meshrelay-server")
		args := containerArgs(t, d, "server")
		for _, want := range []string{
			"--store=memory",
			"--config-source=kube",
			"--plugin-dir=/var/run/meshrelay/plugins",
			"--admin-token-file=/etc/meshrelay/admin/token",
			"--ca-key-encryption-key-file=/etc/meshrelay/ca-key-encryption-key/key",
			"--san=meshrelay-meshrelay-server,meshrelay-meshrelay-server.mr,meshrelay-meshrelay-server.mr.svc,meshrelay-meshrelay-server.mr.svc.cluster.local,localhost",
		} {
			if !slices.Contains(args, want) {
				t.Errorf("server args %q lack %q", args, want)
			}
		}
		for _, arg := range args {
			if strings.HasPrefix(arg, "--ca-") && !strings.HasPrefix(arg, "--ca-key-encryption-key-file=") {
				t.Errorf("server args %q have %q without ca.existingSecret", args, arg)
			}
		}
		inits, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "initContainers")
		var names []string
		for _, c := range inits {
			names = append(names, c.(map[string]any)["name"].(string))
		}
		if want := []string{"plugin-istio", "plugin-envoy", "plugin-cilium", "plugin-gatewayapi"}; !slices.Equal(names, want) {
			t.Errorf("init containers = %q, want %q", names, want)
		}
		// The server accepts only admin tokens shaped like pki.NewToken's.
		secret := find(t, objs, "Secret", "-admin-token")
		encoded, _, _ := unstructured.NestedString(secret.Object, "data", "token")
		tok, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			t.Fatalf("admin token Secret: %v", err)
		}
		if err := pki.ValidateToken(string(tok)); err != nil {
			t.Errorf("generated admin token %q: %v", tok, err)
		}
		for _, o := range objs {
			if o.GetKind() == "PodDisruptionBudget" {
				t.Errorf("one replica rendered a PodDisruptionBudget")
			}
		}
	})
	t.Run("ha-redis", func(t *testing.T) {
		objs := render(t, renderCases["server/ha-redis"], "mr")
		d := find(t, objs, "Deployment", "meshrelay-server")
		if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 3 {
			t.Errorf("replicas = %d, want 3", r)
		}
		args := containerArgs(t, d, "server")
		for _, want := range []string{
			"--store=redis://:$(REDIS_PASSWORD)@redis.meshrelay.svc:6379/2?prefix=fleet-a%3A",
			"--ca-cert=/etc/meshrelay/ca/tls.crt",
			"--ca-key=/etc/meshrelay/ca/tls.key",
			"--ca-chain=/etc/meshrelay/ca/ca.crt",
			"--safe-start-window=5m",
			"--advertise-addr=$(POD_IP):9900",
		} {
			if !slices.Contains(args, want) {
				t.Errorf("server args %q lack %q", args, want)
			}
		}
		// $(REDIS_PASSWORD) and $(POD_IP) in args are only replaced when
		// the variable is defined in the container's env.
		env, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		for _, v := range []string{"name:REDIS_PASSWORD", "name:POD_IP"} {
			if !strings.Contains(fmt.Sprint(env), v) {
				t.Errorf("server container has no %s variable: %v", v, env)
			}
		}
		for _, o := range objs {
			if o.GetKind() == "Secret" {
				t.Errorf("adminToken.existingSecret and caKeyEncryptionKey.existingSecret set, yet Secret %s was rendered", o.GetName())
			}
		}
		find(t, objs, "PodDisruptionBudget", "meshrelay-server")
	})
}

func TestAgentRender(t *testing.T) {
	helmPath(t)
	objs := render(t, renderCases["agent/defaults"], "mr")
	d := find(t, objs, "Deployment", "meshrelay-agent")
	if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 2 {
		t.Errorf("replicas = %d, want 2", r)
	}
	args := containerArgs(t, d, "agent")
	for _, want := range []string{
		"--cluster=east",
		"--server=meshrelay.example.com:9900",
		"--token-file=/etc/meshrelay/relay/token",
		"--ca-file=/etc/meshrelay/relay/ca.crt",
		"--leader-elect",
		"--leader-elect-namespace=$(POD_NAMESPACE)",
		"--leader-elect-name=meshrelay-meshrelay-agent",
		"--xds-addr=:9977",
		"--metrics-addr=:9988",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("agent args %q lack %q", args, want)
		}
	}
	svc := find(t, objs, "Service", "meshrelay-agent")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	var got []int64
	for _, p := range ports {
		got = append(got, p.(map[string]any)["port"].(int64))
	}
	if want := []int64{9977, 9988}; !slices.Equal(got, want) {
		t.Errorf("agent Service ports = %v, want %v", got, want)
	}
}

// TestChartCRDsAreGenerated checks that the server chart's crds/ holds
// exactly the generated CRDs of deploy/crds (policy and discovery), byte for
// byte: `make generate` updates deploy/crds, and the chart must follow.
func TestChartCRDsAreGenerated(t *testing.T) {
	root := repoRoot(t)
	generated, err := filepath.Glob(filepath.Join(root, generatedCRDs))
	if err != nil {
		t.Fatal(err)
	}
	if len(generated) == 0 {
		t.Fatalf("no generated CRDs match %s", generatedCRDs)
	}
	chartDir := filepath.Join(root, serverChart, "crds")
	entries, err := os.ReadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	var inChart []string
	for _, e := range entries {
		inChart = append(inChart, e.Name())
	}
	var want []string
	for _, path := range generated {
		name := filepath.Base(path)
		want = append(want, name)
		genData, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		chartData, err := os.ReadFile(filepath.Join(chartDir, name))
		if err != nil {
			t.Errorf("%s is not in %s: cp %s %s/", name, chartDir, path, chartDir)
			continue
		}
		if !bytes.Equal(genData, chartData) {
			t.Errorf("%s/%s differs from the generated %s: cp %s %s/", chartDir, name, path, path, chartDir)
		}
	}
	slices.Sort(inChart)
	slices.Sort(want)
	if !slices.Equal(inChart, want) {
		t.Errorf("%s holds %q, want exactly the generated %q", chartDir, inChart, want)
	}
}

// rule is one PolicyRule of a rendered Role or ClusterRole.
type rule struct {
	APIGroups       []string `json:"apiGroups"`
	Resources       []string `json:"resources"`
	ResourceNames   []string `json:"resourceNames"`
	NonResourceURLs []string `json:"nonResourceURLs"`
	Verbs           []string `json:"verbs"`
}

// roleRules returns the rules of every Role and ClusterRole in objs, keyed
// by "Kind/name".
func roleRules(t *testing.T, objs []*unstructured.Unstructured) map[string][]rule {
	t.Helper()
	roles := map[string][]rule{}
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		data, err := yaml.Marshal(o.Object["rules"])
		if err != nil {
			t.Fatal(err)
		}
		var rules []rule
		if err := yaml.Unmarshal(data, &rules); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		roles[o.GetKind()+"/"+o.GetName()] = rules
	}
	return roles
}

// mutating are the verbs that change objects.
var mutating = []string{"create", "update", "patch", "delete", "deletecollection", "bind", "escalate", "impersonate"}

func TestAgentRBACIsLeastPrivilege(t *testing.T) {
	helmPath(t)
	// writable maps each group/resource the agent applies to the mutating
	// verbs it may use there.
	all := []string{"create", "update", "patch", "delete"}
	writable := map[string][]string{
		"networking.istio.io/virtualservices":        all,
		"networking.istio.io/destinationrules":       all,
		"networking.istio.io/serviceentries":         all,
		"networking.istio.io/gateways":               all,
		"security.istio.io/authorizationpolicies":    all,
		"security.istio.io/peerauthentications":      all,
		"cilium.io/ciliumnetworkpolicies":            all,
		"cilium.io/ciliumclusterwidenetworkpolicies": all,
		"cilium.io/ciliumenvoyconfigs":               all,
		"networking.k8s.io/networkpolicies":          all,
		"gateway.networking.k8s.io/httproutes":       all,
		"gateway.networking.k8s.io/grpcroutes":       all,
		"policy.linkerd.io/servers":                  all,
		"policy.linkerd.io/authorizationpolicies":    all,
		"policy.linkerd.io/meshtlsauthentications":   all,
		"policy.linkerd.io/httproutes":               all,
		// Global service annotations only: never create or delete Services.
		"/services": {"patch"},
		// Mesh trust: rollout restarts of workloads whose proxies carry an old chain.
		"apps/deployments":  {"patch"},
		"apps/statefulsets": {"patch"},
		"apps/daemonsets":   {"patch"},
	}
	// readable must all be granted get, list and watch cluster-wide.
	readable := []string{
		"/services", "/serviceaccounts", "/namespaces", "/nodes",
		"discovery.k8s.io/endpointslices",
		"apps/deployments", "apps/statefulsets", "apps/daemonsets", "apps/replicasets",
		"apiextensions.k8s.io/customresourcedefinitions",
		"networking.istio.io/virtualservices", "security.istio.io/authorizationpolicies",
		"policy.meshrelay.io/trafficpolicies", "policy.meshrelay.io/accesspolicies", "policy.meshrelay.io/virtualdestinations",
		"policy.meshrelay.io/meshtrusts", "multicluster.linkerd.io/links",
	}

	objs := render(t, renderCases["agent/defaults"], "mr")
	roles := roleRules(t, objs)
	if len(roles) == 0 {
		t.Fatal("the agent chart rendered no Role or ClusterRole")
	}
	read := map[string][]string{}
	for name, rules := range roles {
		clusterWide := strings.HasPrefix(name, "ClusterRole/")
		for _, r := range rules {
			for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.NonResourceURLs} {
				if slices.Contains(field, "*") {
					t.Errorf("%s grants a wildcard: %+v", name, r)
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s grants non-resource URLs: %+v", name, r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					gr := g + "/" + res
					meshTrust := !clusterWide && strings.HasSuffix(name, "-mesh-trust") && gr == "/secrets" && cacertsRule(r)
					if (strings.HasPrefix(res, "secrets") && !meshTrust) || strings.Contains(res, "/") {
						t.Errorf("%s grants %s: %+v", name, gr, r)
					}
					if clusterWide && len(r.ResourceNames) == 0 {
						read[gr] = append(read[gr], r.Verbs...)
					}
					for _, v := range r.Verbs {
						if !slices.Contains(mutating, v) {
							continue
						}
						if meshTrust {
							continue
						}
						if gr == "coordination.k8s.io/leases" {
							if clusterWide {
								t.Errorf("%s grants %s on leases cluster-wide; leader election needs them in its namespace only", name, v)
							}
							continue
						}
						if !clusterWide || !slices.Contains(writable[gr], v) {
							t.Errorf("%s grants %s on %s, which the agent does not apply", name, v, gr)
						}
					}
				}
			}
		}
	}
	for _, gr := range readable {
		for _, v := range []string{"get", "list", "watch"} {
			if !slices.Contains(read[gr], v) {
				t.Errorf("no ClusterRole grants %s on %s, which the agent discovers", v, gr)
			}
		}
	}
	for gr, verbs := range writable {
		for _, v := range verbs {
			if !slices.Contains(read[gr], v) {
				t.Errorf("no ClusterRole grants %s on %s, which the agent applies", v, gr)
			}
		}
	}
}

// meshNamespace creates istio-system, where the agent chart's mesh trust
// Role goes, unless another test did.
func meshNamespace(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "istio-system"}}}
	_, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// inMeshNamespace reports whether obj is the agent's mesh trust Role or
// its binding, which live in the mesh namespace, not the release's.
func inMeshNamespace(obj *unstructured.Unstructured) bool {
	return obj.GetNamespace() == "istio-system" && strings.HasSuffix(obj.GetName(), "-mesh-trust")
}

// cacertsRule reports whether a rule grants only what the mesh trust
// manager needs of Istio's cacerts Secret: get and update by name, create.
func cacertsRule(r rule) bool {
	if slices.Equal(r.ResourceNames, []string{"cacerts"}) {
		return !slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "get" && v != "update" })
	}
	return len(r.ResourceNames) == 0 && slices.Equal(r.Verbs, []string{"create"})
}

func TestServerRBACIsLeastPrivilege(t *testing.T) {
	helmPath(t)
	objs := render(t, renderCases["server/defaults"], "mr")
	policies := []string{"trafficpolicies", "accesspolicies", "virtualdestinations", "meshtrusts", "rolloutstrategies"}
	var granted []string
	for name, rules := range roleRules(t, objs) {
		for _, r := range rules {
			if !slices.Equal(r.APIGroups, []string{"policy.meshrelay.io"}) || len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
				t.Errorf("%s grants more than policy.meshrelay.io: %+v", name, r)
			}
			for _, res := range r.Resources {
				base, sub, _ := strings.Cut(res, "/")
				if !slices.Contains(policies, base) || (sub != "" && sub != "status") {
					t.Errorf("%s grants %s: %+v", name, res, r)
				}
				for _, v := range r.Verbs {
					want := []string{"get", "list", "watch"}
					if sub == "status" {
						want = []string{"update"}
					}
					if !slices.Contains(want, v) {
						t.Errorf("%s grants %s on %s", name, v, res)
					}
					granted = append(granted, v+" "+res)
				}
			}
		}
	}
	for _, p := range policies {
		for _, want := range []string{"get " + p, "list " + p, "watch " + p, "update " + p + "/status"} {
			if !slices.Contains(granted, want) {
				t.Errorf("the server may not %s, which the kube policy source needs", want)
			}
		}
	}

	// A directory policy source talks to no API server: no RBAC at all.
	objs = render(t, renderCases["server/persistent-dir-source"], "mr")
	if roles := roleRules(t, objs); len(roles) != 0 {
		t.Errorf("configSource=dir rendered roles %v", slices.Sorted(maps.Keys(roles)))
	}
}

// TestManifestsAcceptedByAPIServer applies every object each chart renders
// to a real kube-apiserver with server-side apply in dry-run mode: the
// schemas (including the policy CRDs), defaulting, validation and RBAC
// admission must all accept them.
func TestManifestsAcceptedByAPIServer(t *testing.T) {
	helmPath(t) // skip before starting the API server when helm is missing
	k := testenv.SharedKube(t)
	root := repoRoot(t)
	crds, err := filepath.Glob(filepath.Join(root, generatedCRDs))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no generated CRDs match %s: %v", generatedCRDs, err)
	}
	k.InstallCRDs(t, crds...)

	// The mapper learns the policy CRDs' resources on first use, after
	// InstallCRDs.
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discoveryClient(t, k)))
	dyn := k.Dynamic(t)

	meshNamespace(t, dyn)
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			ns := k.CreateNamespace(t)
			for _, obj := range render(t, c, ns) {
				mapping, err := mapper.RESTMapping(obj.GroupVersionKind().GroupKind(), obj.GroupVersionKind().Version)
				if err == nil && mapping.Scope.Name() == meta.RESTScopeNameNamespace && obj.GetNamespace() != ns && !inMeshNamespace(obj) {
					t.Errorf("%s %s is in namespace %q, want the release namespace %q", obj.GetKind(), obj.GetName(), obj.GetNamespace(), ns)
					continue
				}
				if err := apply(t, dyn, mapper, obj, true); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// access is one request whose authorization is checked.
type access struct {
	verb, group, resource, subresource, namespace, name string
	allowed                                             bool
}

// TestRBACAuthorizesOnlyWhatIsNeeded installs each chart's ServiceAccount and
// RBAC in a real kube-apiserver and asks it, with SubjectAccessReviews, what
// the ServiceAccount may do: everything its component needs, and nothing
// next to it.
func TestRBACAuthorizesOnlyWhatIsNeeded(t *testing.T) {
	helmPath(t)
	k := testenv.SharedKube(t)
	dyn := k.Dynamic(t)

	// ns is replaced by the release namespace, other by another one.
	const ns, other = "<ns>", "<other>"
	tests := map[string]struct {
		c      renderCase
		sa     string
		checks []access
	}{
		"agent": {
			c:  renderCases["agent/defaults"],
			sa: "meshrelay-agent",
			checks: []access{
				{verb: "list", resource: "nodes", allowed: true},
				{verb: "get", resource: "configmaps", namespace: other, name: "cilium-config", allowed: true},
				{verb: "watch", resource: "configmaps", namespace: other, name: "linkerd-config", allowed: true},
				{verb: "list", resource: "configmaps", namespace: other, name: "linkerd-identity-trust-roots", allowed: true},
				{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices", allowed: true},
				{verb: "watch", group: "apps", resource: "replicasets", namespace: other, allowed: true},
				{verb: "list", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", allowed: true},
				{verb: "watch", group: "security.istio.io", resource: "requestauthentications", allowed: true},
				{verb: "list", group: "policy.meshrelay.io", resource: "virtualdestinations", allowed: true},
				{verb: "patch", group: "networking.istio.io", resource: "virtualservices", namespace: other, allowed: true},
				{verb: "delete", group: "cilium.io", resource: "ciliumclusterwidenetworkpolicies", allowed: true},
				{verb: "create", group: "networking.k8s.io", resource: "networkpolicies", namespace: other, allowed: true},
				{verb: "patch", group: "gateway.networking.k8s.io", resource: "httproutes", namespace: other, allowed: true},
				{verb: "delete", group: "policy.linkerd.io", resource: "authorizationpolicies", namespace: other, allowed: true},
				{verb: "watch", group: "multicluster.linkerd.io", resource: "links", namespace: other, allowed: true},
				{verb: "patch", group: "multicluster.linkerd.io", resource: "links", namespace: other},
				{verb: "patch", resource: "services", namespace: other, allowed: true},
				{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: ns, allowed: true},
				{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: "<release>-meshrelay-agent", allowed: true},

				{verb: "create", resource: "services", namespace: other},
				{verb: "delete", resource: "services", namespace: other},
				{verb: "update", resource: "nodes"},
				{verb: "get", resource: "secrets", namespace: ns},
				{verb: "list", resource: "configmaps", namespace: other},
				{verb: "get", resource: "configmaps", namespace: other, name: "kube-root-ca.crt"},
				{verb: "list", resource: "pods", namespace: other, allowed: true},                        // which pods predate a mesh trust chain
				{verb: "patch", group: "apps", resource: "deployments", namespace: other, allowed: true}, // rollout restart
				{verb: "update", resource: "secrets", namespace: "istio-system", name: "cacerts", allowed: true},
				{verb: "update", resource: "secrets", namespace: "istio-system", name: "other"},
				{verb: "create", resource: "secrets", namespace: other},
				{verb: "delete", group: "apps", resource: "deployments", namespace: other},
				{verb: "update", group: "policy.meshrelay.io", resource: "trafficpolicies", namespace: other},
				{verb: "patch", group: "networking.istio.io", resource: "sidecars", namespace: other},
				{verb: "create", group: "apiextensions.k8s.io", resource: "customresourcedefinitions"},
				{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: "kube-controller-manager"},
				{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: other},
				{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
			},
		},
		"server": {
			c:  renderCases["server/defaults"],
			sa: "meshrelay-server",
			checks: []access{
				{verb: "watch", group: "policy.meshrelay.io", resource: "trafficpolicies", namespace: other, allowed: true},
				{verb: "get", group: "policy.meshrelay.io", resource: "accesspolicies", namespace: other, allowed: true},
				{verb: "update", group: "policy.meshrelay.io", resource: "virtualdestinations", subresource: "status", namespace: other, allowed: true},

				{verb: "update", group: "policy.meshrelay.io", resource: "virtualdestinations", namespace: other},
				{verb: "delete", group: "policy.meshrelay.io", resource: "trafficpolicies", namespace: other},
				{verb: "patch", group: "policy.meshrelay.io", resource: "trafficpolicies", subresource: "status", namespace: other},
				{verb: "get", resource: "secrets", namespace: ns},
				{verb: "list", resource: "services", namespace: other},
				{verb: "list", group: "apiextensions.k8s.io", resource: "customresourcedefinitions"},
				{verb: "list", group: "discovery.meshrelay.io", resource: "workloads", namespace: ns},
			},
		},
		"server with discovery CRDs": {
			c:  renderCases["server/discovery-crds"],
			sa: "meshrelay-server",
			checks: []access{
				{verb: "list", group: "discovery.meshrelay.io", resource: "workloads", namespace: ns, allowed: true},
				{verb: "patch", group: "discovery.meshrelay.io", resource: "destinations", namespace: ns, allowed: true},
				{verb: "create", group: "discovery.meshrelay.io", resource: "meshes", namespace: ns, allowed: true},
				{verb: "delete", group: "discovery.meshrelay.io", resource: "workloads", namespace: ns, allowed: true},
				{verb: "watch", group: "policy.meshrelay.io", resource: "trafficpolicies", namespace: other, allowed: true},

				{verb: "patch", group: "discovery.meshrelay.io", resource: "workloads", namespace: other},
				{verb: "list", group: "discovery.meshrelay.io", resource: "destinations", namespace: other},
				{verb: "update", group: "discovery.meshrelay.io", resource: "workloads", namespace: ns},
				{verb: "get", resource: "secrets", namespace: ns},
			},
		},
	}
	meshNamespace(t, dyn)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			namespace := k.CreateNamespace(t)
			otherNamespace := k.CreateNamespace(t)
			// ClusterRoles are cluster-wide: a release name of its own keeps
			// them apart from other tests'.
			release := "rbac-" + namespace[len(namespace)-6:]
			mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discoveryClient(t, k)))
			for _, obj := range renderRelease(t, tc.c, release, namespace) {
				switch obj.GetKind() {
				case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
					if err := apply(t, dyn, mapper, obj, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			user := fmt.Sprintf("system:serviceaccount:%s:%s-%s", namespace, release, tc.sa)
			groups := []any{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
			sarGVR := schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "subjectaccessreviews"}
			review := func(a access) (map[string]any, bool) {
				attrs := map[string]any{"verb": a.verb, "group": a.group, "resource": a.resource}
				switch a.namespace {
				case ns:
					attrs["namespace"] = namespace
				case other:
					attrs["namespace"] = otherNamespace
				case "":
				default:
					attrs["namespace"] = a.namespace
				}
				if a.subresource != "" {
					attrs["subresource"] = a.subresource
				}
				if a.name != "" {
					attrs["name"] = strings.ReplaceAll(a.name, "<release>", release)
				}
				sar := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "authorization.k8s.io/v1",
					"kind":       "SubjectAccessReview",
					"spec":       map[string]any{"user": user, "groups": groups, "resourceAttributes": attrs},
				}}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				got, err := dyn.Resource(sarGVR).Create(ctx, sar, metav1.CreateOptions{})
				cancel()
				if err != nil {
					t.Fatalf("SubjectAccessReview %v: %v", attrs, err)
				}
				allowed, _, _ := unstructured.NestedBool(got.Object, "status", "allowed")
				return attrs, allowed
			}
			// The RBAC authorizer reads bindings from an informer, so a
			// binding just created may not count yet: what must be allowed
			// is asked until it is, and only then is what must be denied
			// asked, once, against bindings known to be seen.
			for _, a := range tc.checks {
				if !a.allowed {
					continue
				}
				testutil.EventuallyWhy(t, fmt.Sprintf("%s to be allowed to %s %s", tc.sa, a.verb, a.resource), func() (bool, string) {
					attrs, allowed := review(a)
					return allowed, fmt.Sprintf("%v: allowed = false, want true", attrs)
				})
			}
			for _, a := range tc.checks {
				if a.allowed {
					continue
				}
				if attrs, allowed := review(a); allowed {
					t.Errorf("%s may %s %v: allowed = true, want false", tc.sa, a.verb, attrs)
				}
			}
		})
	}
}

func discoveryClient(t *testing.T, k *testenv.Kube) *discovery.DiscoveryClient {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(k.Config())
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

// apply applies obj with server-side apply, only as a dry run if dryRun.
func apply(t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured, dryRun bool) error {
	t.Helper()
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s %s: %w", gvk, obj.GetName(), err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{
		FieldManager:    "meshrelay-deploy-test",
		Force:           new(true),
		FieldValidation: "Strict",
	}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts); err != nil {
		return fmt.Errorf("server-side apply of %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	return nil
}

// TestServerRenderOCIPlugins renders plugins from OCI registries: an init
// container installing the ConfigMap's lock with --from-lock before the
// plugins image's, one per reference after, the registry credentials
// through DOCKER_CONFIG, and the pods rolled when the lock changes.
func TestServerRenderOCIPlugins(t *testing.T) {
	helmPath(t)
	lock := filepath.Join(t.TempDir(), "plugins.lock.json")
	if err := os.WriteFile(lock, []byte(`{"plugins":[{"name":"acme","source":"oci://ghcr.io/acme/meshrelay-plugin-acme:0.1.0","digest":"sha256:bb"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := renderCase{chart: serverChart, set: []string{
		"plugins.names={istio}",
		"plugins.oci.trustedKeys=KEY",
		"plugins.oci.registrySecret=regcred",
		"plugins.oci.references={oci://registry.example.com/plugins/extra:1.0.0}",
	}}
	args := append([]string{"template", "meshrelay", c.chart, "--namespace", "mr", "--set-file", "plugins.oci.lock=" + lock}, c.valueArgs()...)
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects(out)
	if err != nil {
		t.Fatal(err)
	}
	d := find(t, objs, "Deployment", "meshrelay-server")
	inits, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "initContainers")
	var names []string
	byName := map[string]map[string]any{}
	for _, c := range inits {
		m := c.(map[string]any)
		names = append(names, m["name"].(string))
		byName[m["name"].(string)] = m
	}
	if want := []string{"plugins-from-lock", "plugin-istio", "plugin-oci-0"}; !slices.Equal(names, want) {
		t.Fatalf("init containers = %q, want %q", names, want)
	}
	fromLock := fmt.Sprint(byName["plugins-from-lock"]["args"])
	for _, want := range []string{"--from-lock", "--lock=/etc/meshrelay/plugin-lock/plugins.lock.json", "--verify-key=/etc/meshrelay/plugin-lock/trusted-keys"} {
		if !strings.Contains(fromLock, want) {
			t.Errorf("plugins-from-lock args %s lack %s", fromLock, want)
		}
	}
	if ref := fmt.Sprint(byName["plugin-oci-0"]["args"]); !strings.Contains(ref, "oci://registry.example.com/plugins/extra:1.0.0") {
		t.Errorf("plugin-oci-0 args %s lack the reference", ref)
	}
	if env := fmt.Sprint(byName["plugins-from-lock"]["env"]); !strings.Contains(env, "DOCKER_CONFIG") {
		t.Errorf("plugins-from-lock env %s lacks DOCKER_CONFIG", env)
	}
	cm := find(t, objs, "ConfigMap", "meshrelay-server-plugins")
	if data, _, _ := unstructured.NestedString(cm.Object, "data", "plugins.lock.json"); !strings.Contains(data, "sha256:bb") {
		t.Errorf("plugins ConfigMap's lock = %q", data)
	}
	if ann := d.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"]; !strings.Contains(fmt.Sprint(ann), "checksum/plugins") {
		t.Errorf("pod annotations %v lack checksum/plugins", ann)
	}
}
