package envoy

import (
	"bytes"
	"path/filepath"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEmittedIsObject checks that an emitted object's body is byte for
// byte that of the same resource emitted as an Object (the SDK's generic
// encoding), with and without parents, for every resource of the golden
// fixtures and for strings JSON escapes.
func TestEmittedIsObject(t *testing.T) {
	msgs := []proto.Message{&routev3.RouteConfiguration{
		Name: "odd <name> & \u2028 é",
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "vh",
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Name:  "r",
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `^/a<b>&c\d+$`}}},
				RequestHeadersToAdd: []*corev3.HeaderValueOption{{
					Header: &corev3.HeaderValue{Key: "x", Value: "\"quoted\" \\ \t"},
				}},
			}},
		}},
	}}
	for _, name := range []string{"access", "diagnostics", "traffic", "virtualdestination"} {
		for _, o := range sdktest.Run(t, New(), filepath.Join("testdata", name+".yaml")).Outputs {
			r, err := xds.Decode(o.Body)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, r.Message)
		}
	}
	vd := &policyv1alpha1.VirtualDestination{ObjectMeta: metav1.ObjectMeta{Name: "reviews-global", Namespace: "shop"}}
	tp := &policyv1alpha1.TrafficPolicy{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"}}
	for _, m := range msgs {
		spec, err := xds.JSON(m)
		if err != nil {
			t.Fatal(err)
		}
		canonical, err := canonicalJSON(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, parents := range [][]policyv1alpha1.Policy{nil, {vd}, {tp, vd}} {
			want := emitOne(t, xds.Wrap("node", m, spec), parents)
			got := emitOne(t, newEmitted("node", m, canonical), parents)
			if got.Kind != want.Kind || got.Name != want.Name || got.Namespace != want.Namespace || !bytes.Equal(got.Body, want.Body) {
				t.Errorf("emitted %s %q:\n%s\nwant (as an Object)\n%s", got.Kind, got.Name, got.Body, want.Body)
			}
		}
	}
}

func emitOne(t *testing.T, obj any, parents []policyv1alpha1.Policy) sdk.Output {
	t.Helper()
	resp := sdk.NewResponse(New().Describe(), "east")
	resp.Emit(obj, parents...)
	if err := resp.Err(); err != nil {
		t.Fatal(err)
	}
	return resp.Outputs()[0]
}
