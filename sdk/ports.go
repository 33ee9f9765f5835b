package sdk

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TargetPort is a port of a Service and the ports of the Service's
// workloads it forwards to. Policies name Service ports; a backend that
// enforces access at the workload — a sidecar's authorization, an inbound
// listener, a network policy — sees the workload's port.
type TargetPort struct {
	// Service is the Service's port.
	Service corev1.ServicePort
	// Name is the targetPort when it names a container port, empty when
	// it is a number.
	Name string
	// Numbers are the workload ports, sorted and distinct: the targetPort's
	// number (the Service port's own when unset) or, for a named
	// targetPort, the number each of the Service's workloads gives that
	// name. Empty when nothing in the cluster's inputs tells the number
	// of a named targetPort (a problem of reason [PortNumberUnknown]).
	Numbers []int32
}

// PortReason says why a Service port does not resolve to workload ports.
type PortReason uint8

const (
	// PortNotInService: the Service has no port of that number.
	PortNotInService PortReason = iota + 1
	// PortNoContainerPort: the Service port's targetPort names no container
	// port of the Service's workloads, so the port forwards nowhere.
	PortNoContainerPort
	// PortNumberUnknown: the Service port's targetPort is a name, and
	// neither a workload of the Service nor an endpoint in the cluster's
	// inputs tells its number. A backend that can match container port
	// names itself may still use [TargetPort.Name].
	PortNumberUnknown
)

// PortProblem is a Service port, as a policy names it, that does not
// resolve to workload ports.
type PortProblem struct {
	Reason PortReason
	// Cluster, Namespace and Service name the Service.
	Cluster, Namespace, Service string
	// Port is the Service port number.
	Port int32
	// TargetPort is the named targetPort (PortNoContainerPort,
	// PortNumberUnknown).
	TargetPort string
	// Workloads are the workloads of the Service, as "Kind/name", that
	// have no container port of that name (PortNoContainerPort).
	Workloads []string
}

// String says what is wrong, naming the Service and the port.
func (p PortProblem) String() string {
	svc := fmt.Sprintf("Service %s/%s in cluster %q", p.Namespace, p.Service, p.Cluster)
	switch p.Reason {
	case PortNotInService:
		return fmt.Sprintf("port %d is not a port of %s", p.Port, svc)
	case PortNoContainerPort:
		return fmt.Sprintf("port %d of %s forwards to targetPort %q, but no container port of its workloads (%s) has that name", p.Port, svc, p.TargetPort, strings.Join(p.Workloads, ", "))
	default:
		return fmt.Sprintf("port %d of %s forwards to targetPort %q, whose number no workload or endpoint of the Service tells", p.Port, svc, p.TargetPort)
	}
}

// Warning returns a warning diagnostic on policy at path, for the
// Service's cluster, saying that the policy admits nothing on the port.
func (p PortProblem) Warning(policy policyv1alpha1.Policy, path string) Diagnostic {
	d := Warningf(policy, path, "%s, so the policy admits nothing on it", p)
	d.Cluster = p.Cluster
	return d
}

// TargetPorts resolves ports — Service port numbers, as policies state
// them; nil for every port of the Service — of svc, a Service of c, to the
// ports of the Service's workloads, in the order of the Service's ports. A
// number may name several ports of the Service (one per protocol). A
// number the Service lacks, and a named targetPort that no container port
// of the Service's workloads has, are left out and returned as problems; a
// named targetPort whose number is unknown is kept without numbers, and is
// a problem too.
//
// A named targetPort resolves per workload, as Kubernetes does it: the
// container ports of that name and protocol in the pod templates of the
// Deployments, StatefulSets and DaemonSets in the Service's namespace
// whose labels its selector matches; when there is none of those, the
// numbers of the Service's endpoints (EndpointSlice ports carry them). So
// a computation that resolves a named targetPort reads the cluster's
// workloads (and, failing them, the Service's endpoints); one that resolves
// only numbers reads nothing.
func (c *Cluster) TargetPorts(svc *corev1.Service, ports []int32) ([]TargetPort, []PortProblem) {
	problem := func(r PortReason, port int32) PortProblem {
		return PortProblem{Reason: r, Cluster: c.Name, Namespace: svc.Namespace, Service: svc.Name, Port: port}
	}
	var out []TargetPort
	var problems []PortProblem
	for _, port := range ports {
		if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Port == port }) {
			problems = append(problems, problem(PortNotInService, port))
		}
	}
	for _, sp := range svc.Spec.Ports {
		if ports != nil && !slices.Contains(ports, sp.Port) {
			continue
		}
		if sp.TargetPort.Type != intstr.String || sp.TargetPort.StrVal == "" {
			out = append(out, TargetPort{Service: sp, Numbers: []int32{cmp.Or(sp.TargetPort.IntVal, sp.Port)}})
			continue
		}
		tp := TargetPort{Service: sp, Name: sp.TargetPort.StrVal}
		numbers, without := c.namedPort(svc, sp)
		switch {
		case len(numbers) > 0:
			tp.Numbers = numbers
		case len(without) > 0:
			p := problem(PortNoContainerPort, sp.Port)
			p.TargetPort, p.Workloads = tp.Name, without
			problems = append(problems, p)
			continue
		default:
			p := problem(PortNumberUnknown, sp.Port)
			p.TargetPort = tp.Name
			problems = append(problems, p)
		}
		out = append(out, tp)
	}
	return out, problems
}

// namedPort returns the numbers the Service's workloads give the named
// targetPort of sp, sorted and distinct, and the workloads of the Service
// without a container port of that name. Without workloads, it returns
// the numbers of the Service's endpoints.
func (c *Cluster) namedPort(svc *corev1.Service, sp corev1.ServicePort) (numbers []int32, without []string) {
	protocol := cmp.Or(sp.Protocol, corev1.ProtocolTCP)
	workloads := 0
	if len(svc.Spec.Selector) > 0 {
		for _, w := range c.podTemplates(svc.Namespace) {
			if !labelsContain(w.labels, svc.Spec.Selector) {
				continue
			}
			workloads++
			n, ok := containerPort(w.spec, sp.TargetPort.StrVal, protocol)
			if !ok {
				without = append(without, w.name)
				continue
			}
			numbers = append(numbers, n)
		}
	}
	if workloads == 0 {
		for _, ep := range c.Endpoints(svc.Namespace, svc.Name) {
			if n, ok := ep.Ports[sp.Name]; ok {
				numbers = append(numbers, n)
			}
		}
	}
	slices.Sort(numbers)
	return slices.Compact(numbers), without
}

// containerPort finds the container port of a pod named name with the
// protocol, as Kubernetes resolves a Service's named targetPort.
func containerPort(spec *corev1.PodSpec, name string, protocol corev1.Protocol) (int32, bool) {
	for _, ctr := range spec.Containers {
		for _, p := range ctr.Ports {
			if p.Name == name && cmp.Or(p.Protocol, corev1.ProtocolTCP) == protocol {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

func labelsContain(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// podTemplate is the pod template of a workload.
type podTemplate struct {
	// name is "Kind/name".
	name   string
	labels map[string]string
	spec   *corev1.PodSpec
}

// podTemplates returns the pod templates of the cluster's Deployments,
// StatefulSets and DaemonSets in namespace, in that order of kinds and
// by name. It reads the three kinds.
func (c *Cluster) podTemplates(namespace string) []podTemplate {
	c.readKind("apps", "Deployment")
	c.readKind("apps", "StatefulSet")
	c.readKind("apps", "DaemonSet")
	byNamespace := cached(c.d, "sdk/pod-templates", func() map[string][]podTemplate {
		m := map[string][]podTemplate{}
		for _, d := range decodeKind[appsv1.Deployment](c.d, "apps", "Deployment") {
			m[d.Namespace] = append(m[d.Namespace], podTemplate{name: "Deployment/" + d.Name, labels: d.Spec.Template.Labels, spec: &d.Spec.Template.Spec})
		}
		for _, s := range decodeKind[appsv1.StatefulSet](c.d, "apps", "StatefulSet") {
			m[s.Namespace] = append(m[s.Namespace], podTemplate{name: "StatefulSet/" + s.Name, labels: s.Spec.Template.Labels, spec: &s.Spec.Template.Spec})
		}
		for _, d := range decodeKind[appsv1.DaemonSet](c.d, "apps", "DaemonSet") {
			m[d.Namespace] = append(m[d.Namespace], podTemplate{name: "DaemonSet/" + d.Name, labels: d.Spec.Template.Labels, spec: &d.Spec.Template.Spec})
		}
		return m
	})
	return byNamespace[namespace]
}

// cached returns compute's value, kept in the cluster's decode cache under
// key beside the decoded objects it derives from (two concurrent first
// calls may both compute it). compute decodes with decodeKind, which
// creates the cache: the value is kept only while the cache is.
func cached[T any](cd *clusterData, key string, compute func() T) T {
	cd.mu.Lock()
	v, ok := cd.cache[key]
	cd.mu.Unlock()
	if ok {
		return v.(T)
	}
	t := compute()
	cd.mu.Lock()
	defer cd.mu.Unlock()
	if v, ok := cd.cache[key]; ok {
		return v.(T)
	}
	if cd.cache != nil {
		cd.cache[key] = t
	}
	return t
}
