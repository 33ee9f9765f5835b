package conformance_test

import (
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/plugins/gatewayapi"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// linkerdPolicy is what a cluster's Linkerd authorization resources say.
type linkerdPolicy struct {
	servers []linkerdServer
	// authorizations maps "namespace/Kind/name" of a target to the
	// MeshTLSAuthentications ("namespace/name") that admit to it.
	authorizations map[string][]string
	// identities maps "namespace/name" of a MeshTLSAuthentication to its
	// identities.
	identities map[string][]string
	// routes maps "namespace/name" of a Server to the names of its
	// HTTPRoutes.
	routes map[string][]string
}

type linkerdServer struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		PodSelector  metav1.LabelSelector `json:"podSelector"`
		Port         intstr.IntOrString   `json:"port"`
		AccessPolicy string               `json:"accessPolicy"`
	} `json:"spec"`
}

// linkerdPolicies reads the gatewayapi translator's Linkerd resources, by
// cluster.
func linkerdPolicies(t *testing.T, res *sdktest.Result) map[string]*linkerdPolicy {
	t.Helper()
	out := map[string]*linkerdPolicy{}
	for _, o := range res.Outputs {
		p := out[o.Cluster]
		if p == nil {
			p = &linkerdPolicy{authorizations: map[string][]string{}, identities: map[string][]string{}, routes: map[string][]string{}}
			out[o.Cluster] = p
		}
		type ref struct{ Kind, Name, Namespace string }
		switch o.Kind {
		case gatewayapi.KindServer:
			var s linkerdServer
			decode(t, o.Body, &s)
			p.servers = append(p.servers, s)
		case gatewayapi.KindAuthorizationPolicy:
			var a struct {
				Spec struct {
					TargetRef                  ref   `json:"targetRef"`
					RequiredAuthenticationRefs []ref `json:"requiredAuthenticationRefs"`
				} `json:"spec"`
			}
			decode(t, o.Body, &a)
			if len(a.Spec.RequiredAuthenticationRefs) != 1 || a.Spec.RequiredAuthenticationRefs[0].Kind != gatewayapi.KindMeshTLSAuthentication {
				t.Fatalf("AuthorizationPolicy %s/%s: want one MeshTLSAuthentication, got %+v", o.Namespace, o.Name, a.Spec.RequiredAuthenticationRefs)
			}
			authn := a.Spec.RequiredAuthenticationRefs[0]
			key := o.Namespace + "/" + a.Spec.TargetRef.Kind + "/" + a.Spec.TargetRef.Name
			p.authorizations[key] = append(p.authorizations[key], cmpOr(authn.Namespace, o.Namespace)+"/"+authn.Name)
		case gatewayapi.KindMeshTLSAuthentication:
			var m struct {
				Spec struct {
					Identities []string `json:"identities"`
				} `json:"spec"`
			}
			decode(t, o.Body, &m)
			p.identities[o.Namespace+"/"+o.Name] = m.Spec.Identities
		case gatewayapi.KindHTTPRoute:
			var r struct {
				Spec struct {
					ParentRefs []ref `json:"parentRefs"`
				} `json:"spec"`
			}
			decode(t, o.Body, &r)
			for _, parent := range r.Spec.ParentRefs {
				p.routes[o.Namespace+"/"+parent.Name] = append(p.routes[o.Namespace+"/"+parent.Name], o.Name)
			}
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// linkerdDecider decides a connection as Linkerd's inbound proxy does: a
// workload port that no Server selects takes the cluster's default
// (all-unauthenticated: allowed); one a Server selects is admitted when an
// AuthorizationPolicy on the Server, or on one of its routes, requires a
// MeshTLSAuthentication one of whose identities is the client's.
func linkerdDecider(t *testing.T, policies map[string]*linkerdPolicy) func(client, destination) bool {
	return func(c client, d destination) bool {
		p := policies[d.Cluster]
		if p == nil {
			return true
		}
		// The fleet's Linkerd trust domains are the clusters' names.
		identity := c.ServiceAccount + "." + c.Namespace + ".serviceaccount.identity.linkerd." + c.Cluster
		selected := false
		for _, s := range p.servers {
			port := s.Spec.Port
			if s.Metadata.Namespace != d.Namespace || !subset(s.Spec.PodSelector.MatchLabels, d.Labels) ||
				!(port.Type == intstr.Int && port.IntVal == d.Port || port.Type == intstr.String && port.StrVal == d.PortName && d.PortName != "") {
				continue
			}
			selected = true
			targets := []string{d.Namespace + "/" + gatewayapi.KindServer + "/" + s.Metadata.Name}
			for _, r := range p.routes[d.Namespace+"/"+s.Metadata.Name] {
				targets = append(targets, d.Namespace+"/"+gatewayapi.KindHTTPRoute+"/"+r)
			}
			for _, target := range targets {
				for _, authn := range p.authorizations[target] {
					for _, id := range p.identities[authn] {
						if id == "*" || id == identity || strings.HasPrefix(id, "*.") && strings.HasSuffix(identity, id[1:]) {
							return true
						}
					}
				}
			}
		}
		return !selected
	}
}

// TestLinkerdDecisionsAgree evaluates the gatewayapi translator's Linkerd
// authorization of the shared fleet, whose Linkerd clusters have trust
// domains of their own (so identities tell clusters apart): Linkerd must
// decide every connection as Istio does.
func TestLinkerdDecisionsAgree(t *testing.T) {
	fx, f := loadFleet(t)
	want := f.decide(istioDecider(t, istioPolicies(t, translate(t, istio.New(), fx, "istio"))))
	got := f.decide(linkerdDecider(t, linkerdPolicies(t, translate(t, gatewayapi.New(), fx, "linkerd"))))
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("decisions of Istio (-) and Linkerd (+) differ:\n%s", diff)
	}
}

// TestLinkerdSharedTrustDomainIsWarned shows what the comparison catches
// when the clusters share a trust domain, as Linkerd's default makes
// them: identities no longer tell the clusters apart, so a selector of one
// cluster admits another's clients. Linkerd then admits connections Istio
// denies, and the translator must say so.
func TestLinkerdSharedTrustDomainIsWarned(t *testing.T) {
	fx, f := loadFleet(t)
	shared := &sdktest.Fixture{Policies: fx.Policies}
	for _, c := range fx.Clusters {
		var objs [][]byte
		for _, raw := range c.Objects {
			objs = append(objs, []byte(strings.Replace(string(raw), `"trustDomain":"`+c.Name+`"`, `"trustDomain":"cluster.local"`, 1)))
		}
		c.Objects = nil
		for _, o := range objs {
			c.Objects = append(c.Objects, o)
		}
		shared.Clusters = append(shared.Clusters, c)
	}
	res := translate(t, gatewayapi.New(), shared, "linkerd")
	want := f.decide(istioDecider(t, istioPolicies(t, translate(t, istio.New(), fx, "istio"))))
	decide := linkerdDecider(t, linkerdPolicies(t, res))
	got := f.decide(func(c client, d destination) bool {
		c.Cluster = "cluster.local" // the identity's trust domain
		return decide(c, d)
	})
	if gocmp.Equal(want, got) {
		t.Fatal("with one trust domain Linkerd decides as Istio: the comparison cannot tell cluster-blind identities apart")
	}
	warned := false
	for _, d := range res.Diagnostics {
		warned = warned || strings.Contains(d.Summary, "shares trust domain")
	}
	if !warned {
		t.Error("clusters sharing a trust domain got no warning")
	}
}
