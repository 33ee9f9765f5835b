package v1alpha1

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits enforced by Validate.
const (
	// MaxRetryAttempts is the largest RetryPolicy.Attempts.
	MaxRetryAttempts = 10
)

var (
	httpMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"}

	retryConditions = []string{
		"5xx", "gateway-error", "reset", "connect-failure", "retriable-4xx", "refused-stream",
		"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable",
	}

	// headerName is an RFC 9110 token.
	headerName = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
)

// Validate checks the TrafficPolicy; see Policy.Validate.
func (p *TrafficPolicy) Validate() field.ErrorList {
	errs := validateMeta(&p.ObjectMeta, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	errs = append(errs, validateDestinationSelectors(p.Spec.DestinationSelectors, spec.Child("destinationSelectors"), true)...)
	if len(p.Spec.HTTP) == 0 {
		errs = append(errs, field.Required(spec.Child("http"), "must have at least one rule"))
	}
	names := sets.New[string]()
	for i := range p.Spec.HTTP {
		rule := &p.Spec.HTTP[i]
		path := spec.Child("http").Index(i)
		if rule.Name != "" {
			if names.Has(rule.Name) {
				errs = append(errs, field.Duplicate(path.Child("name"), rule.Name))
			}
			names.Insert(rule.Name)
		}
		errs = append(errs, validateHTTPRule(rule, path)...)
	}
	return errs
}

func validateHTTPRule(rule *HTTPRule, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if rule.Name != "" {
		errs = append(errs, dns1123Label(rule.Name, path.Child("name"))...)
	}
	if len(rule.Route) == 0 && rule.Retries == nil && rule.Timeout == nil && rule.Fault == nil &&
		rule.Mirror == nil && rule.Headers == nil {
		errs = append(errs, field.Required(path, "must set at least one of route, retries, timeout, fault, mirror, headers"))
	}
	for i := range rule.Matches {
		errs = append(errs, validateHTTPMatch(&rule.Matches[i], path.Child("matches").Index(i))...)
	}
	errs = append(errs, validateRoute(rule.Route, path.Child("route"))...)
	if rule.Timeout != nil {
		errs = append(errs, positiveDuration(*rule.Timeout, path.Child("timeout"))...)
	}
	if r := rule.Retries; r != nil {
		errs = append(errs, validateRetries(r, rule.Timeout, path.Child("retries"))...)
	}
	if f := rule.Fault; f != nil {
		errs = append(errs, validateFault(f, path.Child("fault"))...)
	}
	if m := rule.Mirror; m != nil {
		mp := path.Child("mirror")
		errs = append(errs, validateDestination(&m.Destination, mp.Child("destination"))...)
		if m.Percent != nil {
			errs = append(errs, percent(*m.Percent, mp.Child("percent"))...)
		}
	}
	if h := rule.Headers; h != nil {
		hp := path.Child("headers")
		errs = append(errs, validateHeaderOperations(h.Request, hp.Child("request"))...)
		errs = append(errs, validateHeaderOperations(h.Response, hp.Child("response"))...)
	}
	return errs
}

// validateRetries checks a rule's retries; a try may not outlast the
// rule's timeout.
func validateRetries(r *RetryPolicy, timeout *metav1.Duration, rp *field.Path) field.ErrorList {
	errs := inRange(int64(r.Attempts), 0, MaxRetryAttempts, rp.Child("attempts"))
	if r.PerTryTimeout != nil {
		errs = append(errs, positiveDuration(*r.PerTryTimeout, rp.Child("perTryTimeout"))...)
		if timeout != nil && timeout.Duration > 0 && r.PerTryTimeout.Duration > timeout.Duration {
			errs = append(errs, field.Invalid(rp.Child("perTryTimeout"), r.PerTryTimeout.Duration.String(),
				fmt.Sprintf("must not exceed timeout (%s)", timeout.Duration)))
		}
	}
	return append(errs, supportedOnce(r.RetryOn, retryConditions, rp.Child("retryOn"))...)
}

// validateFault checks a rule's fault injection: a delay, an abort or both.
func validateFault(f *FaultInjection, fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if f.Delay == nil && f.Abort == nil {
		errs = append(errs, field.Required(fp, "must set delay or abort"))
	}
	if d := f.Delay; d != nil {
		errs = append(errs, percent(d.Percent, fp.Child("delay", "percent"))...)
		errs = append(errs, positiveDuration(d.FixedDelay, fp.Child("delay", "fixedDelay"))...)
	}
	if a := f.Abort; a != nil {
		errs = append(errs, percent(a.Percent, fp.Child("abort", "percent"))...)
		errs = append(errs, inRange(int64(a.HTTPStatus), 200, 599, fp.Child("abort", "httpStatus"))...)
	}
	return errs
}

// supportedOnce checks that each value of a list is one of supported and
// appears once.
func supportedOnce[T ~string](values []T, supported []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[T]()
	for i, v := range values {
		vp := path.Index(i)
		switch {
		case !slices.Contains(supported, string(v)):
			errs = append(errs, field.NotSupported(vp, v, supported))
		case seen.Has(v):
			errs = append(errs, field.Duplicate(vp, v))
		}
		seen.Insert(v)
	}
	return errs
}

func validateHTTPMatch(m *HTTPMatch, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.Path != nil {
		pp := path.Child("path")
		switch m.Path.Type {
		case "", MatchExact, MatchPrefix:
			if !strings.HasPrefix(m.Path.Value, "/") {
				errs = append(errs, field.Invalid(pp.Child("value"), m.Path.Value, `must start with "/"`))
			}
		case MatchRegex:
			errs = append(errs, validRegex(m.Path.Value, pp.Child("value"))...)
		default:
			errs = append(errs, field.NotSupported(pp.Child("type"), m.Path.Type,
				[]MatchType{MatchExact, MatchPrefix, MatchRegex}))
		}
	}
	if m.Method != "" && !slices.Contains(httpMethods, string(m.Method)) {
		errs = append(errs, field.NotSupported(path.Child("method"), m.Method, httpMethods))
	}
	for i, h := range m.Headers {
		hp := path.Child("headers").Index(i)
		errs = append(errs, validHeaderName(h.Name, hp.Child("name"))...)
		errs = append(errs, validateValueMatch(h.Type, h.Value, hp,
			[]MatchType{MatchExact, MatchPrefix, MatchRegex, MatchPresent})...)
	}
	for i, q := range m.QueryParams {
		qp := path.Child("queryParams").Index(i)
		if q.Name == "" {
			errs = append(errs, field.Required(qp.Child("name"), ""))
		}
		errs = append(errs, validateValueMatch(q.Type, q.Value, qp,
			[]MatchType{MatchExact, MatchRegex, MatchPresent})...)
	}
	return errs
}

// validateValueMatch checks the type and value of a header or query
// parameter match; an empty type means Exact.
func validateValueMatch(t MatchType, value string, path *field.Path, allowed []MatchType) field.ErrorList {
	if t == "" {
		t = MatchExact
	}
	if !slices.Contains(allowed, t) {
		return field.ErrorList{field.NotSupported(path.Child("type"), t, allowed)}
	}
	switch t {
	case MatchPresent:
		if value != "" {
			return field.ErrorList{field.Forbidden(path.Child("value"), "must be empty when type is Present")}
		}
	case MatchRegex:
		return validRegex(value, path.Child("value"))
	}
	return nil
}

func validateRoute(route []WeightedDestination, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	var sum int64
	weightsOK := true
	for i := range route {
		dp := path.Index(i)
		errs = append(errs, validateDestination(&route[i].Destination, dp)...)
		w := route[i].Weight
		if w < 0 || w > 100 {
			weightsOK = false
			errs = append(errs, field.Invalid(dp.Child("weight"), w, "must be between 0 and 100"))
		}
		sum += int64(w)
	}
	if weightsOK && len(route) > 0 && sum != 0 && sum != 100 {
		errs = append(errs, field.Invalid(path, sum, "weights must sum to 100, or all be omitted for an equal split"))
	}
	return errs
}

func validateDestination(d *Destination, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case d.Service == nil && d.VirtualDestination == nil:
		errs = append(errs, field.Required(path, "must set service or virtualDestination"))
	case d.Service != nil && d.VirtualDestination != nil:
		errs = append(errs, field.Forbidden(path.Child("virtualDestination"), "must not be set together with service"))
	case d.Service != nil:
		sp := path.Child("service")
		s := d.Service
		errs = append(errs, requiredDNS1123Label(s.Cluster, sp.Child("cluster"))...)
		errs = append(errs, requiredDNS1123Label(s.Namespace, sp.Child("namespace"))...)
		errs = append(errs, requiredDNS1123Label(s.Name, sp.Child("name"))...)
		errs = append(errs, inRange(int64(s.Port), 0, 65535, sp.Child("port"))...)
	default:
		vp := path.Child("virtualDestination")
		v := d.VirtualDestination
		if v.Namespace != "" {
			errs = append(errs, dns1123Label(v.Namespace, vp.Child("namespace"))...)
		}
		errs = append(errs, requiredDNS1123Subdomain(v.Name, vp.Child("name"))...)
		errs = append(errs, inRange(int64(v.Port), 0, 65535, vp.Child("port"))...)
	}
	errs = append(errs, metav1validation.ValidateLabels(d.Subset, path.Child("subset"))...)
	return errs
}

func validateHeaderOperations(ops *HeaderOperations, path *field.Path) field.ErrorList {
	if ops == nil {
		return nil
	}
	var errs field.ErrorList
	for i, h := range ops.Set {
		errs = append(errs, validHeaderName(h.Name, path.Child("set").Index(i).Child("name"))...)
	}
	for i, h := range ops.Add {
		errs = append(errs, validHeaderName(h.Name, path.Child("add").Index(i).Child("name"))...)
	}
	for i, name := range ops.Remove {
		errs = append(errs, validHeaderName(name, path.Child("remove").Index(i))...)
	}
	return errs
}

// Validate checks the AccessPolicy; see Policy.Validate.
func (p *AccessPolicy) Validate() field.ErrorList {
	errs := validateMeta(&p.ObjectMeta, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	s := &p.Spec
	errs = append(errs, validateDestinationSelectors(s.DestinationSelectors, spec.Child("destinationSelectors"), true)...)
	switch s.Action {
	case "", ActionAllow:
		if len(s.From) == 0 {
			errs = append(errs, field.Required(spec.Child("from"), "an Allow policy must name its clients"))
		}
	case ActionDenyAll:
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"from", len(s.From) > 0}, {"ports", len(s.Ports) > 0}, {"methods", len(s.Methods) > 0}, {"paths", len(s.Paths) > 0},
		} {
			if f.set {
				errs = append(errs, field.Forbidden(spec.Child(f.name), "must be empty when action is DenyAll"))
			}
		}
	default:
		errs = append(errs, field.NotSupported(spec.Child("action"), s.Action, []AccessAction{ActionAllow, ActionDenyAll}))
	}
	for i := range s.From {
		errs = append(errs, validateClientSelector(&s.From[i], spec.Child("from").Index(i))...)
	}
	ports := sets.New[int32]()
	for i, port := range s.Ports {
		pp := spec.Child("ports").Index(i)
		if ports.Has(port) {
			errs = append(errs, field.Duplicate(pp, port))
		}
		ports.Insert(port)
		errs = append(errs, inRange(int64(port), 1, 65535, pp)...)
	}
	errs = append(errs, supportedOnce(s.Methods, httpMethods, spec.Child("methods"))...)
	paths := sets.New[string]()
	for i, path := range s.Paths {
		pp := spec.Child("paths").Index(i)
		switch {
		case !strings.HasPrefix(path, "/"):
			errs = append(errs, field.Invalid(pp, path, `must start with "/"`))
		case strings.Contains(strings.TrimSuffix(path, "*"), "*"):
			errs = append(errs, field.Invalid(pp, path, `"*" is allowed only as the last character`))
		case paths.Has(path):
			errs = append(errs, field.Duplicate(pp, path))
		}
		paths.Insert(path)
	}
	return errs
}

func validateClientSelector(c *ClientSelector, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(c.ServiceAccounts) == 0 && len(c.Namespaces) == 0 && !c.RestrictsClusters() {
		errs = append(errs, field.Required(path, "must set at least one of serviceAccounts, namespaces, clusters, clusterSelector"))
	}
	for i, sa := range c.ServiceAccounts {
		sp := path.Child("serviceAccounts").Index(i)
		if sa.Cluster != "" {
			errs = append(errs, dns1123Label(sa.Cluster, sp.Child("cluster"))...)
		}
		errs = append(errs, requiredDNS1123Label(sa.Namespace, sp.Child("namespace"))...)
		errs = append(errs, requiredDNS1123Subdomain(sa.Name, sp.Child("name"))...)
	}
	errs = append(errs, dns1123Labels(c.Namespaces, path.Child("namespaces"))...)
	errs = append(errs, dns1123Labels(c.Clusters, path.Child("clusters"))...)
	errs = append(errs, validateClusterSelector(c.ClusterSelector, path.Child("clusterSelector"))...)
	return errs
}

// validateClusterSelector checks a clusterSelector as Kubernetes checks a
// LabelSelector: label keys and values, operators, and values present
// exactly for In and NotIn.
func validateClusterSelector(sel *metav1.LabelSelector, path *field.Path) field.ErrorList {
	if sel == nil {
		return nil
	}
	return metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, path)
}

// Validate checks the VirtualDestination; see Policy.Validate.
func (p *VirtualDestination) Validate() field.ErrorList {
	errs := validateMeta(&p.ObjectMeta, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	s := &p.Spec
	errs = append(errs, requiredDNS1123Subdomain(s.Hostname, spec.Child("hostname"))...)
	errs = append(errs, validateVirtualPorts(s.Ports, spec.Child("ports"))...)
	if len(s.Services) == 0 && len(s.DestinationSelectors) == 0 {
		errs = append(errs, field.Required(spec.Child("services"), "must set services or destinationSelectors"))
	}
	serviceErrs, clusters := validateBackingServices(s.Services, spec.Child("services"))
	errs = append(errs, serviceErrs...)
	errs = append(errs, validateDestinationSelectors(s.DestinationSelectors, spec.Child("destinationSelectors"), false)...)
	if f := s.Failover; f != nil {
		// Only an explicit backend list tells which clusters exist.
		if len(s.DestinationSelectors) > 0 || len(s.Services) == 0 {
			clusters = nil
		}
		errs = append(errs, validateFailover(f, clusters, spec.Child("failover"))...)
		if s.OutlierDetection == nil {
			errs = append(errs, field.Required(spec.Child("outlierDetection"), "failover needs outlier detection to eject unhealthy endpoints"))
		}
	}
	if o := s.OutlierDetection; o != nil {
		errs = append(errs, validateOutlierDetection(o, spec.Child("outlierDetection"))...)
	}
	return errs
}

// validateVirtualPorts checks a VirtualDestination's ports: at least one,
// each number once, each with a protocol.
func validateVirtualPorts(ports []VirtualPort, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(ports) == 0 {
		errs = append(errs, field.Required(path, "must have at least one port"))
	}
	numbers := sets.New[int32]()
	protocols := []Protocol{ProtocolHTTP, ProtocolHTTP2, ProtocolGRPC, ProtocolTCP, ProtocolTLS}
	for i, port := range ports {
		pp := path.Index(i)
		errs = append(errs, inRange(int64(port.Number), 1, 65535, pp.Child("number"))...)
		if numbers.Has(port.Number) {
			errs = append(errs, field.Duplicate(pp.Child("number"), port.Number))
		}
		numbers.Insert(port.Number)
		switch {
		case port.Protocol == "":
			errs = append(errs, field.Required(pp.Child("protocol"), ""))
		case !slices.Contains(protocols, port.Protocol):
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, protocols))
		}
		errs = append(errs, inRange(int64(port.TargetPort), 0, 65535, pp.Child("targetPort"))...)
	}
	return errs
}

// validateBackingServices checks a VirtualDestination's services, each
// listed once, and returns the clusters they are in.
func validateBackingServices(services []BackingService, path *field.Path) (field.ErrorList, sets.Set[string]) {
	var errs field.ErrorList
	backends := sets.New[BackingService]()
	clusters := sets.New[string]()
	for i, svc := range services {
		sp := path.Index(i)
		errs = append(errs, requiredDNS1123Label(svc.Cluster, sp.Child("cluster"))...)
		errs = append(errs, requiredDNS1123Label(svc.Namespace, sp.Child("namespace"))...)
		errs = append(errs, requiredDNS1123Label(svc.Name, sp.Child("name"))...)
		if backends.Has(svc) {
			errs = append(errs, field.Duplicate(sp, svc))
		}
		backends.Insert(svc)
		clusters.Insert(svc.Cluster)
	}
	return errs, clusters
}

// validateFailover checks a failover's mode and, in Priority mode, its
// clusters: each once and, when clusters is not nil (the services list
// every backend), among clusters.
func validateFailover(f *Failover, clusters sets.Set[string], fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch f.Mode {
	case FailoverPriority:
		if len(f.Priority) == 0 {
			errs = append(errs, field.Required(fp.Child("priority"), "must list clusters when mode is Priority"))
		}
		seen := sets.New[string]()
		for i, c := range f.Priority {
			cp := fp.Child("priority").Index(i)
			nameErrs := requiredDNS1123Label(c, cp)
			errs = append(errs, nameErrs...)
			if seen.Has(c) {
				errs = append(errs, field.Duplicate(cp, c))
			}
			seen.Insert(c)
			if clusters != nil && len(nameErrs) == 0 && !clusters.Has(c) {
				errs = append(errs, field.Invalid(cp, c, "no service in spec.services is in this cluster"))
			}
		}
	case FailoverLocality:
		if len(f.Priority) > 0 {
			errs = append(errs, field.Forbidden(fp.Child("priority"), "must be empty when mode is Locality"))
		}
	case "":
		errs = append(errs, field.Required(fp.Child("mode"), ""))
	default:
		errs = append(errs, field.NotSupported(fp.Child("mode"), f.Mode, []FailoverMode{FailoverPriority, FailoverLocality}))
	}
	return errs
}

// validateOutlierDetection checks when endpoints are ejected, and for how
// long.
func validateOutlierDetection(o *OutlierDetection, op *field.Path) field.ErrorList {
	var errs field.ErrorList
	if o.ConsecutiveErrors < 1 {
		errs = append(errs, field.Invalid(op.Child("consecutiveErrors"), o.ConsecutiveErrors, "must be at least 1"))
	}
	errs = append(errs, positiveDuration(o.Interval, op.Child("interval"))...)
	errs = append(errs, positiveDuration(o.BaseEjectionTime, op.Child("baseEjectionTime"))...)
	errs = append(errs, percent(o.MaxEjectionPercent, op.Child("maxEjectionPercent"))...)
	return errs
}

func validateMeta(m *metav1.ObjectMeta, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, requiredDNS1123Subdomain(m.Name, path.Child("name"))...)
	if m.Namespace != "" {
		errs = append(errs, dns1123Label(m.Namespace, path.Child("namespace"))...)
	}
	return errs
}

func validateDestinationSelectors(sels []DestinationSelector, path *field.Path, required bool) field.ErrorList {
	var errs field.ErrorList
	if required && len(sels) == 0 {
		errs = append(errs, field.Required(path, "must have at least one selector; {} selects every destination"))
	}
	for i, s := range sels {
		sp := path.Index(i)
		errs = append(errs, dns1123Labels(s.Clusters, sp.Child("clusters"))...)
		errs = append(errs, validateClusterSelector(s.ClusterSelector, sp.Child("clusterSelector"))...)
		errs = append(errs, dns1123Labels(s.Namespaces, sp.Child("namespaces"))...)
		errs = append(errs, dns1123Labels(s.Names, sp.Child("names"))...)
		errs = append(errs, metav1validation.ValidateLabels(s.Labels, sp.Child("labels"))...)
	}
	return errs
}

func dns1123Labels(values []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, v := range values {
		errs = append(errs, requiredDNS1123Label(v, path.Index(i))...)
	}
	return errs
}

// requiredDNS1123Subdomain checks a value that must be a DNS-1123 subdomain
// (a Kubernetes object name, a hostname).
func requiredDNS1123Subdomain(v string, path *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(v) {
		errs = append(errs, field.Invalid(path, v, msg))
	}
	return errs
}

func requiredDNS1123Label(v string, path *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	return dns1123Label(v, path)
}

func dns1123Label(v string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(v) {
		errs = append(errs, field.Invalid(path, v, msg))
	}
	return errs
}

func validHeaderName(name string, path *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	if !headerName.MatchString(name) {
		return field.ErrorList{field.Invalid(path, name, "must be a valid HTTP header name")}
	}
	return nil
}

func validRegex(expr string, path *field.Path) field.ErrorList {
	if expr == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	if _, err := regexp.Compile(expr); err != nil {
		return field.ErrorList{field.Invalid(path, expr, fmt.Sprintf("must be a valid RE2 regular expression: %v", err))}
	}
	return nil
}

func positiveDuration(d metav1.Duration, path *field.Path) field.ErrorList {
	if d.Duration <= 0 {
		return field.ErrorList{field.Invalid(path, d.Duration.String(), "must be positive")}
	}
	return nil
}

func percent(v int32, path *field.Path) field.ErrorList {
	return inRange(int64(v), 0, 100, path)
}

func inRange(v, lo, hi int64, path *field.Path) field.ErrorList {
	if v < lo || v > hi {
		return field.ErrorList{field.Invalid(path, v, fmt.Sprintf("must be between %d and %d", lo, hi))}
	}
	return nil
}
