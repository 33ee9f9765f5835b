package gatewayapi

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// API versions of Linkerd's policy resources.
const (
	linkerdServerVersion = LinkerdPolicyGroup + "/v1beta3"
	linkerdRouteVersion  = LinkerdPolicyGroup + "/v1beta3"
	linkerdAuthVersion   = LinkerdPolicyGroup + "/v1alpha1"
)

// linkerdObject is a Linkerd policy resource.
type linkerdObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              any `json:"spec"`
}

func newLinkerdObject(apiVersion, kind, namespace, name string, spec any) *linkerdObject {
	return &linkerdObject{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       spec,
	}
}

type serverSpec struct {
	PodSelector   metav1.LabelSelector `json:"podSelector"`
	Port          intstr.IntOrString   `json:"port"`
	ProxyProtocol string               `json:"proxyProtocol"`
	AccessPolicy  string               `json:"accessPolicy"`
}

type objectRef struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

type authorizationSpec struct {
	TargetRef                  objectRef   `json:"targetRef"`
	RequiredAuthenticationRefs []objectRef `json:"requiredAuthenticationRefs"`
}

type meshTLSSpec struct {
	Identities []string `json:"identities"`
}

type routeSpec struct {
	ParentRefs []objectRef  `json:"parentRefs"`
	Rules      []routeRules `json:"rules"`
}

type routeRules struct {
	Matches []routeMatch `json:"matches"`
}

type routeMatch struct {
	Path   *routePath `json:"path,omitempty"`
	Method string     `json:"method,omitempty"`
}

type routePath struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// server is a Linkerd Server the target gets: one port of a Service that
// AccessPolicies select, and what admits requests to it.
type server struct {
	name    string
	svc     *corev1.Service
	port    corev1.ServicePort
	parents []policyv1alpha1.Policy
	whole   []*policyv1alpha1.AccessPolicy
	scoped  []*policyv1alpha1.AccessPolicy
}

// accessPolicies emits Linkerd's authorization for the AccessPolicies
// selecting the target's Services: a Server with accessPolicy deny per
// port of each selected Service (default-deny), and for each Allow
// policy a MeshTLSAuthentication of its clients and AuthorizationPolicies
// admitting them to the Servers of its ports, or to HTTPRoutes of its
// methods and paths.
func (tr *translation) accessPolicies(aps []*policyv1alpha1.AccessPolicy) {
	tr.authn = map[*policyv1alpha1.AccessPolicy][]string{}
	servers := map[string]*server{}
	var order []string
	for _, ap := range aps {
		dests := tr.target.Select(ap.Spec.DestinationSelectors)
		if len(dests) == 0 {
			continue
		}
		var ids []string
		if ap.Spec.Action != policyv1alpha1.ActionDenyAll {
			ids = tr.identities(ap)
			tr.authn[ap] = ids
		}
		for _, d := range dests {
			svc := d.Service
			if len(svc.Spec.Selector) == 0 {
				tr.warn(ap, "spec.destinationSelectors", "Service %s/%s in cluster %q has no selector, so no Linkerd Server can select its pods: it is not protected", svc.Namespace, svc.Name, tr.target.Name)
				continue
			}
			admitted := tr.admittedPorts(ap, svc)
			for _, sp := range svc.Spec.Ports {
				if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
					continue
				}
				key := svc.Namespace + "/" + svc.Name + "/" + strconv.Itoa(int(sp.Port))
				s := servers[key]
				if s == nil {
					s = &server{name: svc.Name + "-" + strconv.Itoa(int(sp.Port)), svc: svc, port: sp}
					servers[key] = s
					order = append(order, key)
				}
				if !slices.Contains(s.parents, policyv1alpha1.Policy(ap)) {
					s.parents = append(s.parents, ap)
				}
				if len(ids) == 0 || !admitted[sp.Port] {
					continue
				}
				scoped := len(ap.Spec.Methods) > 0 || len(ap.Spec.Paths) > 0
				if scoped && !httpPort(sp) {
					tr.warn(ap, "spec.methods", "port %d of Service %s/%s in cluster %q does not carry HTTP, so methods and paths admit nothing there", sp.Port, svc.Namespace, svc.Name, tr.target.Name)
					continue
				}
				if scoped {
					s.scoped = append(s.scoped, ap)
				} else {
					s.whole = append(s.whole, ap)
				}
			}
		}
	}
	slices.Sort(order)
	emitted := map[string]bool{}
	for _, key := range order {
		tr.server(servers[key], emitted)
	}
}

// authentication returns the name of the MeshTLSAuthentication of a
// policy's clients in namespace, emitting it the first time.
func (tr *translation) authentication(ap *policyv1alpha1.AccessPolicy, namespace string, emitted map[string]bool) string {
	name := "meshrelay-" + refHash(ap)
	if !emitted[namespace+"/"+name] {
		emitted[namespace+"/"+name] = true
		tr.emit(newLinkerdObject(linkerdAuthVersion, KindMeshTLSAuthentication, namespace, name, meshTLSSpec{Identities: tr.authn[ap]}), ap)
	}
	return name
}

// server emits a Server and what admits requests to it.
func (tr *translation) server(s *server, emitted map[string]bool) {
	port := intstr.FromInt32(cmpOr(s.port.TargetPort.IntVal, s.port.Port))
	if s.port.TargetPort.Type == intstr.String && s.port.TargetPort.StrVal != "" {
		port = intstr.FromString(s.port.TargetPort.StrVal)
	}
	ns := s.svc.Namespace
	tr.emit(newLinkerdObject(linkerdServerVersion, KindServer, ns, s.name, serverSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: s.svc.Spec.Selector}, Port: port,
		ProxyProtocol: proxyProtocol(s.port), AccessPolicy: "deny",
	}), s.parents...)
	authorize := func(ap *policyv1alpha1.AccessPolicy, target objectRef) {
		name := target.Name + "-" + refHash(ap)
		if strings.HasSuffix(target.Name, "-"+refHash(ap)) {
			name = target.Name // the policy's own route
		}
		tr.emit(newLinkerdObject(linkerdAuthVersion, KindAuthorizationPolicy, ns, name, authorizationSpec{
			TargetRef:                  target,
			RequiredAuthenticationRefs: []objectRef{{Group: LinkerdPolicyGroup, Kind: KindMeshTLSAuthentication, Name: tr.authentication(ap, ns, emitted)}},
		}), ap)
	}
	serverRef := objectRef{Group: LinkerdPolicyGroup, Kind: KindServer, Name: s.name}
	if len(s.scoped) == 0 {
		for _, ap := range s.whole {
			authorize(ap, serverRef)
		}
		return
	}
	// Once routes attach to a Server, Linkerd admits only requests that
	// match one, by that route's authorizations: a catch-all route keeps
	// the rest of the port reachable, and the policies admitting the whole
	// port admit every route.
	routes := []objectRef{{Group: LinkerdPolicyGroup, Kind: KindHTTPRoute, Name: s.name + "-all"}}
	tr.emit(newLinkerdObject(linkerdRouteVersion, KindHTTPRoute, ns, routes[0].Name, routeSpec{
		ParentRefs: []objectRef{serverRef},
		Rules:      []routeRules{{Matches: []routeMatch{{Path: &routePath{Type: "PathPrefix", Value: "/"}}}}},
	}), s.parents...)
	for _, ap := range s.scoped {
		ref := objectRef{Group: LinkerdPolicyGroup, Kind: KindHTTPRoute, Name: s.name + "-" + refHash(ap)}
		tr.emit(newLinkerdObject(linkerdRouteVersion, KindHTTPRoute, ns, ref.Name, routeSpec{
			ParentRefs: []objectRef{serverRef},
			Rules:      []routeRules{{Matches: accessMatches(ap)}},
		}), ap)
		authorize(ap, ref)
		routes = append(routes, ref)
	}
	for _, ap := range s.whole {
		for _, r := range routes {
			authorize(ap, r)
		}
	}
}

// accessMatches returns the route matches of a policy's methods and paths:
// every method with every path.
func accessMatches(ap *policyv1alpha1.AccessPolicy) []routeMatch {
	var paths []*routePath
	for _, p := range ap.Spec.Paths {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			paths = append(paths, &routePath{Type: "RegularExpression", Value: regexp.QuoteMeta(prefix) + ".*"})
		} else {
			paths = append(paths, &routePath{Type: "Exact", Value: p})
		}
	}
	if len(paths) == 0 {
		paths = []*routePath{{Type: "PathPrefix", Value: "/"}}
	}
	methods := ap.Spec.Methods
	if len(methods) == 0 {
		methods = []policyv1alpha1.HTTPMethod{""}
	}
	var out []routeMatch
	for _, m := range methods {
		for _, p := range paths {
			out = append(out, routeMatch{Path: p, Method: string(m)})
		}
	}
	return out
}

// admittedPorts returns the Service ports an Allow policy admits on svc:
// its ports, or every port; a port the Service lacks gets a warning.
func (tr *translation) admittedPorts(ap *policyv1alpha1.AccessPolicy, svc *corev1.Service) map[int32]bool {
	out := map[int32]bool{}
	for _, sp := range svc.Spec.Ports {
		if len(ap.Spec.Ports) == 0 || slices.Contains(ap.Spec.Ports, sp.Port) {
			out[sp.Port] = true
		}
	}
	for i, p := range ap.Spec.Ports {
		if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Port == p }) {
			tr.warn(ap, fmt.Sprintf("spec.ports[%d]", i), "port %d is not a port of Service %s/%s in cluster %q: nothing is admitted on it", p, svc.Namespace, svc.Name, tr.target.Name)
		}
	}
	return out
}

// sharedTrustDomains maps each cluster of the fleet running Linkerd to
// its identity trust domain. It is shared: a target depends on the table,
// not on every cluster's meshes.
var sharedTrustDomains = sdk.NewShared("gatewayapi/linkerd-trust-domains", func(f *sdk.Fleet) map[string]string {
	out := map[string]string{}
	for _, c := range f.ClustersWithMesh(discoveryapi.MeshLinkerd) {
		m, _ := meshOf(c, discoveryapi.MeshLinkerd)
		out[c.Name] = cmp.Or(m.TrustDomain, defaultTrustDomain)
	}
	return out
})

// defaultTrustDomain is Linkerd's identity trust domain unless configured.
const defaultTrustDomain = "cluster.local"

// identities returns the Linkerd identities of a policy's clients, sorted:
// "<sa>.<ns>.serviceaccount.identity.linkerd.<domain>",
// "*.<ns>.serviceaccount.identity.linkerd.<domain>" for a namespace and
// "*.serviceaccount.identity.linkerd.<domain>" for any, in the trust
// domain of each Linkerd cluster the selector admits (every one when it
// names and selects none; none when its clusterSelector matches no
// cluster and it names none, see sdk.Fleet.ClientClusters). An identity names no cluster, only a trust domain: where
// a cluster the selector names shares its trust domain with a Linkerd
// cluster it does not name, the identity admits the clients of both, and
// a warning says so. Clients of clusters without Linkerd have no Linkerd
// identity and are left out with a warning.
func (tr *translation) identities(ap *policyv1alpha1.AccessPolicy) []string {
	domains := sharedTrustDomains.Get(tr.fleet)
	byDomain := map[string][]string{}
	for c, d := range domains {
		byDomain[d] = append(byDomain[d], c)
	}
	// domainsOf returns the trust domains of the clusters cc admits
	// (every Linkerd cluster for any), warning at path about those named
	// that run no Linkerd and about what they cannot tell apart.
	domainsOf := func(cc sdk.ClientClusters, named []string, path string) []string {
		if cc.Any {
			return slices.Sorted(maps.Keys(byDomain))
		}
		clusters := cc.Names
		var out []string
		for _, c := range clusters {
			d, ok := domains[c]
			if !ok {
				if slices.Contains(named, c) {
					tr.warn(ap, path, "cluster %q runs no Linkerd, so its clients have no Linkerd identity: they are not admitted in cluster %q", c, tr.target.Name)
				}
				continue
			}
			out = append(out, d)
			for _, other := range byDomain[d] {
				if !slices.Contains(clusters, other) {
					tr.warn(ap, path, "Linkerd identities name a trust domain, not a cluster: cluster %q shares trust domain %s with cluster %q, whose clients are admitted too", c, d, other)
				}
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	var out []string
	for i, cs := range ap.Spec.From {
		at := fmt.Sprintf("spec.from[%d]", i)
		cc := tr.fleet.ClientClusters(&ap.Spec.From[i])
		if d, ok := cc.Warning(ap, at); ok {
			tr.diagnose(d)
		}
		if cc.None() {
			continue
		}
		clusterDomains := domainsOf(cc, cs.Clusters, at+".clusters")
		switch {
		case len(cs.ServiceAccounts) > 0:
			for j, sa := range cs.ServiceAccounts {
				if len(cs.Namespaces) > 0 && !slices.Contains(cs.Namespaces, sa.Namespace) {
					continue
				}
				ds := clusterDomains
				if sa.Cluster != "" {
					if !cc.Admits(sa.Cluster) {
						continue
					}
					ds = domainsOf(sdk.ClientClusters{Names: []string{sa.Cluster}}, []string{sa.Cluster}, fmt.Sprintf("%s.serviceAccounts[%d].cluster", at, j))
				}
				for _, d := range ds {
					out = append(out, sa.Name+"."+sa.Namespace+identitySuffix+d)
				}
			}
		case len(cs.Namespaces) > 0:
			for _, ns := range cs.Namespaces {
				for _, d := range clusterDomains {
					out = append(out, "*."+ns+identitySuffix+d)
				}
			}
		default:
			for _, d := range clusterDomains {
				out = append(out, "*"+identitySuffix+d)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// identitySuffix follows the namespace in a Linkerd identity, before the
// trust domain.
const identitySuffix = ".serviceaccount.identity.linkerd."

// proxyProtocol returns the Server's proxyProtocol for a Service port:
// what its appProtocol or name declares, else unknown (Linkerd detects
// it).
func proxyProtocol(sp corev1.ServicePort) string {
	switch declaredProtocol(sp) {
	case "http":
		return "HTTP/1"
	case "http2", "h2c":
		return "HTTP/2"
	case "grpc":
		return "gRPC"
	case "tls", "https":
		return "TLS"
	case "tcp", "mongo", "mysql", "redis":
		return "opaque"
	}
	return "unknown"
}

// httpPort reports whether a port may carry HTTP to Linkerd: declared
// HTTP, or left to detection.
func httpPort(sp corev1.ServicePort) bool {
	switch proxyProtocol(sp) {
	case "HTTP/1", "HTTP/2", "gRPC", "unknown":
		return true
	}
	return false
}

// refHash returns a short hash of a policy's reference, for names.
func refHash(p policyv1alpha1.Policy) string {
	sum := sha256.Sum256([]byte(sdk.RefOf(p).Key()))
	return hex.EncodeToString(sum[:])[:10]
}

func cmpOr(a, b int32) int32 {
	if a != 0 {
		return a
	}
	return b
}
