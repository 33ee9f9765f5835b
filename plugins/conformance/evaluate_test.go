package conformance_test

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"

	ciliumutils "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/utils"
	"github.com/cilium/cilium/pkg/labels"
	ciliumapi "github.com/cilium/cilium/pkg/policy/api"
	policytypes "github.com/cilium/cilium/pkg/policy/types"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetworkv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/cilium"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/plugins/internal/rbaceval"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	securityapi "istio.io/api/security/v1beta1"
	clientsecurity "istio.io/client-go/pkg/apis/security/v1"
)

// istioRootNamespace is the Istio root namespace of the fleet's mesh,
// whose AuthorizationPolicies apply to every namespace.
const istioRootNamespace = "istio-system"

// istioPolicies decodes the emitted AuthorizationPolicies, per cluster.
func istioPolicies(t *testing.T, res *sdktest.Result) map[string][]*clientsecurity.AuthorizationPolicy {
	t.Helper()
	out := map[string][]*clientsecurity.AuthorizationPolicy{}
	for _, o := range res.Outputs {
		if o.Kind != "AuthorizationPolicy" {
			continue
		}
		ap := &clientsecurity.AuthorizationPolicy{}
		decode(t, o.Body, ap)
		out[o.Cluster] = append(out[o.Cluster], ap)
	}
	if len(out) == 0 {
		t.Fatal("Istio emitted no AuthorizationPolicy")
	}
	return out
}

// istioDecider evaluates AuthorizationPolicies as Istio does for an mTLS
// connection: the policies of the workload's namespace and of the root
// namespace whose selector matches the workload apply; a matching DENY
// rule denies; with ALLOW policies, some rule of one must match. A source
// matches the principal <trust domain>/ns/<namespace>/sa/<account> (the
// trust domain is the cluster's) and the namespace; an operation the
// workload's port. Fields the evaluator does not know fail the test.
func istioDecider(t *testing.T, policies map[string][]*clientsecurity.AuthorizationPolicy) func(client, destination) bool {
	return func(c client, d destination) bool {
		var allow, deny []*securityapi.AuthorizationPolicy
		for _, ap := range policies[d.Cluster] {
			if ap.Namespace != d.Namespace && ap.Namespace != istioRootNamespace {
				continue
			}
			if sel := ap.Spec.GetSelector(); sel != nil && !subset(sel.GetMatchLabels(), d.Labels) {
				continue
			}
			switch ap.Spec.GetAction() {
			case securityapi.AuthorizationPolicy_ALLOW:
				allow = append(allow, &ap.Spec)
			case securityapi.AuthorizationPolicy_DENY:
				deny = append(deny, &ap.Spec)
			default:
				t.Fatalf("AuthorizationPolicy %s/%s: action %v is not known to the evaluator", ap.Namespace, ap.Name, ap.Spec.GetAction())
			}
		}
		matches := func(p *securityapi.AuthorizationPolicy) bool {
			return slices.ContainsFunc(p.GetRules(), func(r *securityapi.Rule) bool { return istioRuleMatches(t, r, c, d) })
		}
		if slices.ContainsFunc(deny, matches) {
			return false
		}
		return len(allow) == 0 || slices.ContainsFunc(allow, matches)
	}
}

func istioRuleMatches(t *testing.T, r *securityapi.Rule, c client, d destination) bool {
	if len(r.GetWhen()) > 0 {
		t.Fatalf("rule %v: conditions are not known to the evaluator", r)
	}
	principal := fmt.Sprintf("%s/ns/%s/sa/%s", c.Cluster, c.Namespace, c.ServiceAccount)
	from := len(r.GetFrom()) == 0
	for _, f := range r.GetFrom() {
		s := f.GetSource()
		if len(s.GetRequestPrincipals())+len(s.GetNotRequestPrincipals())+len(s.GetIpBlocks())+len(s.GetNotIpBlocks())+
			len(s.GetRemoteIpBlocks())+len(s.GetNotRemoteIpBlocks()) > 0 {
			t.Fatalf("source %v: fields not known to the evaluator", s)
		}
		matchAny := func(patterns []string, v string) bool {
			return slices.ContainsFunc(patterns, func(p string) bool { return istioMatch(p, v) })
		}
		if len(s.GetPrincipals()) > 0 && !matchAny(s.GetPrincipals(), principal) ||
			matchAny(s.GetNotPrincipals(), principal) ||
			len(s.GetNamespaces()) > 0 && !matchAny(s.GetNamespaces(), c.Namespace) ||
			matchAny(s.GetNotNamespaces(), c.Namespace) {
			continue
		}
		from = true
	}
	to := len(r.GetTo()) == 0
	for _, x := range r.GetTo() {
		op := x.GetOperation()
		if len(op.GetHosts())+len(op.GetNotHosts())+len(op.GetMethods())+len(op.GetNotMethods())+len(op.GetPaths())+len(op.GetNotPaths()) > 0 {
			t.Fatalf("operation %v: fields not known to the evaluator", op)
		}
		port := portString(d.Port)
		if len(op.GetPorts()) > 0 && !slices.Contains(op.GetPorts(), port) || slices.Contains(op.GetNotPorts(), port) {
			continue
		}
		to = true
	}
	return from && to
}

// istioMatch matches as Istio matches principals and namespaces: exactly,
// or with one "*" at the start or the end.
func istioMatch(pattern, value string) bool {
	switch {
	case pattern == "*":
		return true
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(value, strings.TrimSuffix(pattern, "*"))
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(value, strings.TrimPrefix(pattern, "*"))
	}
	return pattern == value
}

// ciliumRules decodes the rules of the emitted Cilium policies into
// Cilium's api.Rule and passes them through Cilium's own sanitizer and
// parser, as the agent does: a namespaced policy's rules get its
// namespace, and peers the defaults Cilium gives them. Per cluster.
func ciliumRules(t *testing.T, res *sdktest.Result) map[string]ciliumapi.Rules {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	out := map[string]ciliumapi.Rules{}
	for _, o := range res.Outputs {
		if o.Kind != cilium.KindNetworkPolicy && o.Kind != cilium.KindClusterwidePolicy {
			continue
		}
		var p struct {
			Spec  *ciliumapi.Rule `json:"spec"`
			Specs ciliumapi.Rules `json:"specs"`
		}
		decode(t, o.Body, &p)
		rules := p.Specs
		if p.Spec != nil {
			rules = append(ciliumapi.Rules{p.Spec}, rules...)
		}
		namespace := o.Namespace
		if o.Kind == cilium.KindClusterwidePolicy {
			namespace = ""
		}
		for _, r := range rules {
			if err := r.Sanitize(); err != nil {
				t.Fatalf("%s %s/%s: Cilium refuses it: %v", o.Kind, o.Namespace, o.Name, err)
			}
			out[o.Cluster] = append(out[o.Cluster], ciliumutils.ParseToCiliumRule(logger, o.Cluster, namespace, o.Name, "", r))
		}
	}
	if len(out) == 0 {
		t.Fatal("Cilium emitted no policy")
	}
	return out
}

// ciliumDecider evaluates Cilium rules for ingress: a workload no rule
// with ingress selects admits everything; one that some select admits
// what an ingress rule of one of them admits. A client is its identity
// labels (namespace, service account, cluster); a workload its pod labels
// with its namespace and cluster. Ports match by number or by the name of
// the workload's container port.
func ciliumDecider(t *testing.T, rules map[string]ciliumapi.Rules) func(client, destination) bool {
	return func(c client, d destination) bool {
		pod := []string{cilium.LabelNamespace + "=" + d.Namespace, cilium.LabelCluster + "=" + d.Cluster}
		for k, v := range d.Labels {
			pod = append(pod, "k8s:"+k+"="+v)
		}
		podLabels := labels.ParseLabelArray(pod...)
		peer := labels.ParseLabelArray(cilium.LabelNamespace+"="+c.Namespace, cilium.LabelServiceAccount+"="+c.ServiceAccount,
			cilium.LabelCluster+"="+c.Cluster)
		selected, allowed := false, false
		for _, r := range rules[d.Cluster] {
			if !policytypes.NewLabelSelector(r.EndpointSelector).Matches(podLabels) {
				continue
			}
			if len(r.IngressDeny) > 0 {
				t.Fatalf("rule %v: ingressDeny is not known to the evaluator", r)
			}
			if len(r.Ingress) == 0 && (r.EnableDefaultDeny.Ingress == nil || !*r.EnableDefaultDeny.Ingress) {
				continue
			}
			selected = true
			for _, in := range r.Ingress {
				if ciliumPeerMatches(t, in, peer) && ciliumPortMatches(t, in, d) {
					allowed = true
				}
			}
		}
		return !selected || allowed
	}
}

func ciliumPeerMatches(t *testing.T, in ciliumapi.IngressRule, peer labels.LabelArray) bool {
	if len(in.FromEntities)+len(in.FromCIDR)+len(in.FromCIDRSet)+len(in.FromRequires)+len(in.FromGroups)+len(in.FromNodes) > 0 {
		t.Fatalf("ingress rule %v: peers not known to the evaluator", in)
	}
	if in.FromEndpoints == nil {
		return len(in.ToPorts) > 0 // ports without peers admit any peer
	}
	return slices.ContainsFunc(in.FromEndpoints, func(sel ciliumapi.EndpointSelector) bool {
		return policytypes.NewLabelSelector(sel).Matches(peer)
	})
}

func ciliumPortMatches(t *testing.T, in ciliumapi.IngressRule, d destination) bool {
	if len(in.ToPorts) == 0 {
		return true
	}
	for _, pr := range in.ToPorts {
		if !pr.Rules.IsEmpty() {
			t.Fatalf("port rule %v: L7 rules are not known to the evaluator", pr)
		}
		for _, pp := range pr.Ports {
			proto := strings.ToUpper(string(pp.Protocol))
			if proto != "" && proto != "ANY" && proto != "TCP" {
				continue
			}
			if pp.Port == portString(d.Port) || d.PortName != "" && strings.EqualFold(pp.Port, d.PortName) {
				return true
			}
		}
	}
	return false
}

// envoyListeners decodes the emitted Listeners, by cluster and name.
func envoyListeners(t *testing.T, res *sdktest.Result) map[string]map[string]*listenerv3.Listener {
	t.Helper()
	out := map[string]map[string]*listenerv3.Listener{}
	for _, o := range res.Outputs {
		if o.Kind != xds.KindListener {
			continue
		}
		r, err := xds.Decode(o.Body)
		if err != nil {
			t.Fatal(err)
		}
		if out[o.Cluster] == nil {
			out[o.Cluster] = map[string]*listenerv3.Listener{}
		}
		out[o.Cluster][r.Name] = r.Message.(*listenerv3.Listener)
	}
	return out
}

// envoyNetworkRBACFilter is the name of Envoy's RBAC network filter, which
// an inbound Listener of a port that is not HTTP may carry.
const envoyNetworkRBACFilter = "envoy.filters.network.rbac"

// envoyDecider evaluates the RBAC filters of the inbound Listener on the
// workload's address and port for an mTLS client whose certificate names
// its SPIFFE ID: the RBAC network filter and the HTTP connection manager's
// RBAC HTTP filter, in series. A filter without rules admits everything;
// an ALLOW filter admits what some policy matches, a DENY filter the
// rest. A workload without an inbound Listener fails the test.
func envoyDecider(t *testing.T, listeners map[string]map[string]*listenerv3.Listener) func(client, destination) bool {
	return func(c client, d destination) bool {
		name := envoy.InboundListenerPrefix + net.JoinHostPort(d.Address, portString(d.Port))
		l, ok := listeners[d.Cluster][name]
		if !ok {
			t.Fatalf("%s: no inbound Listener %q", d, name)
		}
		principal := envoy.SPIFFEID(c.Cluster, c.Namespace, c.ServiceAccount)
		for _, rules := range envoyRBAC(t, l) {
			if rules == nil {
				continue
			}
			matched := false
			for _, p := range rules.GetPolicies() {
				matched = matched || rbaceval.PolicyMatches(t, p, rbaceval.Request{Principal: principal, Port: uint32(d.Port)})
			}
			switch rules.GetAction() {
			case rbacv3.RBAC_ALLOW:
				if !matched {
					return false
				}
			case rbacv3.RBAC_DENY:
				if matched {
					return false
				}
			default:
				t.Fatalf("%s: RBAC action %v is not known to the evaluator", name, rules.GetAction())
			}
		}
		return true
	}
}

// envoyRBAC returns the rules of the Listener's RBAC filters: network
// filters, and HTTP filters of its HTTP connection manager.
func envoyRBAC(t *testing.T, l *listenerv3.Listener) []*rbacv3.RBAC {
	t.Helper()
	var out []*rbacv3.RBAC
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			switch f.GetName() {
			case envoyNetworkRBACFilter:
				var cfg rbacnetworkv3.RBAC
				if err := f.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
					t.Fatal(err)
				}
				if cfg.GetShadowRules() != nil || cfg.GetMatcher() != nil {
					t.Fatalf("network RBAC %v: fields not known to the evaluator", &cfg)
				}
				out = append(out, cfg.GetRules())
			case envoy.HCMFilter:
				var hcm hcmv3.HttpConnectionManager
				if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					t.Fatal(err)
				}
				for _, hf := range hcm.GetHttpFilters() {
					if hf.GetName() != envoy.RBACFilter {
						continue
					}
					var cfg rbacfilterv3.RBAC
					if err := hf.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
						t.Fatal(err)
					}
					if cfg.GetMatcher() != nil {
						t.Fatalf("HTTP RBAC %v: fields not known to the evaluator", &cfg)
					}
					out = append(out, cfg.GetRules())
				}
			}
		}
	}
	return out
}
