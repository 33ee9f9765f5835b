package envoy

import (
	"fmt"
	"slices"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// backend is a Service backing a VirtualDestination, reduced to what node
// groups' resources use of it: where it is, the labels TrafficPolicies
// select it by, and its ports. Its endpoints are not part of it: each
// target reads them itself, so that it depends on exactly the endpoints it
// serves.
type backend struct {
	cluster, namespace, name string
	labels                   map[string]string
	ports                    []corev1.ServicePort
}

// service returns a fresh Service carrying what the backend kept.
func (b backend) service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.namespace, Name: b.name, Labels: b.labels},
		Spec:       corev1.ServiceSpec{Ports: b.ports},
	}
}

// virtualBackends returns the backing Services of every VirtualDestination,
// by policy, each list sorted by cluster, namespace and name. Every envoy
// target needs them and finding them looks at every cluster's Services, so
// the value is shared: a target depends on the backends, not on every
// Service the selectors were matched against, and a change to a backing
// Service that leaves its labels and ports alone recomputes no target.
func virtualBackends(f *sdk.Fleet) map[sdk.PolicyRef][]backend {
	return sharedBackends.Get(f)
}

// sharedBackends is virtualBackends' value, which targets share.
var sharedBackends = sdk.NewShared("envoy/virtual-destination-backends", func(f *sdk.Fleet) map[sdk.PolicyRef][]backend {
	out := map[sdk.PolicyRef][]backend{}
	for _, vd := range f.VirtualDestinations() {
		out[sdk.RefOf(vd)] = backendsOf(f, vd)
	}
	return out
})

// virtualDestinationWarnings returns a warning per Service a
// VirtualDestination lists that does not exist. It is shared so that a
// target depends on the warnings, not on the Services they are about.
func virtualDestinationWarnings(f *sdk.Fleet) []sdk.Diagnostic {
	return sharedWarnings.Get(f)
}

// sharedWarnings is virtualDestinationWarnings' value, which targets
// share.
var sharedWarnings = sdk.NewShared("envoy/virtual-destination-warnings", func(f *sdk.Fleet) []sdk.Diagnostic {
	var out []sdk.Diagnostic
	for _, vd := range f.VirtualDestinations() {
		_, missing := listedServices(f, vd)
		out = append(out, missing...)
	}
	return out
})

// backendsOf returns a VirtualDestination's backing Services: those it
// lists that exist and those its selectors match, once each, sorted by
// cluster, namespace and name.
func backendsOf(f *sdk.Fleet, vd *policyv1alpha1.VirtualDestination) []backend {
	listed, _ := listedServices(f, vd)
	dests := append(listed, f.Select(vd.Spec.DestinationSelectors)...)
	slices.SortStableFunc(dests, func(a, b sdk.Destination) int { return a.Key().Compare(b.Key()) })
	dests = slices.CompactFunc(dests, func(a, b sdk.Destination) bool { return a.Key() == b.Key() })
	out := make([]backend, 0, len(dests))
	for _, d := range dests {
		out = append(out, backend{
			cluster: d.Cluster.Name, namespace: d.Service.Namespace, name: d.Service.Name,
			labels: d.Service.Labels, ports: d.Service.Spec.Ports,
		})
	}
	return out
}

// listedServices looks up the Services a VirtualDestination lists, with a
// warning for each one that does not exist.
func listedServices(f *sdk.Fleet, vd *policyv1alpha1.VirtualDestination) (found []sdk.Destination, missing []sdk.Diagnostic) {
	for i, bs := range vd.Spec.Services {
		c, ok := f.Cluster(bs.Cluster)
		var svc *corev1.Service
		if ok {
			svc, ok = c.Service(bs.Namespace, bs.Name)
		}
		if !ok {
			missing = append(missing, sdk.Warningf(vd, fmt.Sprintf("spec.services[%d]", i),
				"service %s/%s not found in cluster %q", bs.Namespace, bs.Name, bs.Cluster))
			continue
		}
		found = append(found, sdk.Destination{Cluster: c, Service: svc})
	}
	return found, missing
}
