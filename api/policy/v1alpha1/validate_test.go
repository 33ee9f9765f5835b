package v1alpha1

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func int32p(v int32) *int32 { return &v }

func svc(cluster, name string) *ServiceRef {
	return &ServiceRef{Cluster: cluster, Namespace: "bookinfo", Name: name, Port: 9080}
}

func validTrafficPolicy() *TrafficPolicy {
	return &TrafficPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "bookinfo"},
		Spec: TrafficPolicySpec{
			DestinationSelectors: []DestinationSelector{{Namespaces: []string{"bookinfo"}, Names: []string{"reviews"}}},
			HTTP: []HTTPRule{{
				Name: "reviews",
				Matches: []HTTPMatch{{
					Path:        &PathMatch{Type: MatchPrefix, Value: "/reviews"},
					Method:      "GET",
					Headers:     []HeaderMatch{{Name: "x-user", Type: MatchExact, Value: "jason"}},
					QueryParams: []QueryParamMatch{{Name: "debug", Type: MatchPresent}},
				}},
				Route: []WeightedDestination{
					{Destination: Destination{Service: svc("east", "reviews"), Subset: map[string]string{"version": "v1"}}, Weight: 50},
					{Destination: Destination{Service: svc("east", "reviews"), Subset: map[string]string{"version": "v2"}}, Weight: 30},
					{Destination: Destination{VirtualDestination: &VirtualDestinationRef{Name: "reviews-global"}}, Weight: 20},
				},
				Retries: &RetryPolicy{Attempts: 2, PerTryTimeout: dur(time.Second), RetryOn: []RetryCondition{"5xx", "reset"}},
				Timeout: dur(3 * time.Second),
				Fault: &FaultInjection{
					Delay: &FaultDelay{Percent: 10, FixedDelay: metav1.Duration{Duration: time.Second}},
					Abort: &FaultAbort{Percent: 5, HTTPStatus: 503},
				},
				Mirror: &Mirror{Destination: Destination{Service: svc("west", "reviews")}, Percent: int32p(10)},
				Headers: &HeaderManipulation{
					Request:  &HeaderOperations{Set: []HTTPHeader{{Name: "x-a", Value: "1"}}, Add: []HTTPHeader{{Name: "x-b", Value: "2"}}, Remove: []string{"x-c"}},
					Response: &HeaderOperations{Remove: []string{"server"}},
				},
			}},
		},
	}
}

func validAccessPolicy() *AccessPolicy {
	return &AccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "bookinfo"},
		Spec: AccessPolicySpec{
			DestinationSelectors: []DestinationSelector{{Names: []string{"reviews"}}},
			Action:               ActionAllow,
			From: []ClientSelector{{
				ServiceAccounts: []ServiceAccountRef{{Cluster: "east", Namespace: "bookinfo", Name: "bookinfo-productpage"}},
				Namespaces:      []string{"bookinfo"},
				Clusters:        []string{"east"},
			}},
			Ports:   []int32{9080},
			Methods: []HTTPMethod{"GET"},
			Paths:   []string{"/reviews*", "/health"},
		},
	}
}

func validVirtualDestination() *VirtualDestination {
	return &VirtualDestination{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews-global", Namespace: "bookinfo"},
		Spec: VirtualDestinationSpec{
			Hostname: "reviews.global",
			Ports:    []VirtualPort{{Number: 9080, Protocol: ProtocolHTTP, TargetPort: 9080}},
			Services: []BackingService{
				{Cluster: "east", Namespace: "bookinfo", Name: "reviews"},
				{Cluster: "west", Namespace: "bookinfo", Name: "reviews"},
			},
			Failover: &Failover{Mode: FailoverPriority, Priority: []string{"east", "west"}},
			OutlierDetection: &OutlierDetection{
				ConsecutiveErrors: 5, Interval: metav1.Duration{Duration: 10 * time.Second},
				BaseEjectionTime: metav1.Duration{Duration: 30 * time.Second}, MaxEjectionPercent: 100,
			},
		},
	}
}

// wantOne checks that errs is exactly one error of type typ at path.
func wantOne(t *testing.T, errs field.ErrorList, path string, typ field.ErrorType) {
	t.Helper()
	if len(errs) != 1 {
		t.Fatalf("Validate() = %d errors %v, want 1 %s at %s", len(errs), errs, typ, path)
	}
	if errs[0].Field != path || errs[0].Type != typ {
		t.Errorf("Validate() = %q, want %s at %s", errs[0].Error(), typ, path)
	}
}

func TestValidValid(t *testing.T) {
	for name, p := range map[string]Policy{
		"TrafficPolicy":      validTrafficPolicy(),
		"AccessPolicy":       validAccessPolicy(),
		"VirtualDestination": validVirtualDestination(),
	} {
		t.Run(name, func(t *testing.T) {
			if errs := p.Validate(); len(errs) != 0 {
				t.Errorf("Validate() = %v, want none", errs)
			}
		})
	}
}

func TestTrafficPolicyValidate(t *testing.T) {
	tests := map[string]struct {
		mutate func(*TrafficPolicy)
		path   string
		typ    field.ErrorType
	}{
		"missing name":       {func(p *TrafficPolicy) { p.Name = "" }, "metadata.name", field.ErrorTypeRequired},
		"bad name":           {func(p *TrafficPolicy) { p.Name = "Reviews" }, "metadata.name", field.ErrorTypeInvalid},
		"bad namespace":      {func(p *TrafficPolicy) { p.Namespace = "book.info" }, "metadata.namespace", field.ErrorTypeInvalid},
		"no selectors":       {func(p *TrafficPolicy) { p.Spec.DestinationSelectors = nil }, "spec.destinationSelectors", field.ErrorTypeRequired},
		"bad cluster":        {func(p *TrafficPolicy) { p.Spec.DestinationSelectors[0].Clusters = []string{"East"} }, "spec.destinationSelectors[0].clusters[0]", field.ErrorTypeInvalid},
		"empty cluster":      {func(p *TrafficPolicy) { p.Spec.DestinationSelectors[0].Clusters = []string{""} }, "spec.destinationSelectors[0].clusters[0]", field.ErrorTypeRequired},
		"bad selector ns":    {func(p *TrafficPolicy) { p.Spec.DestinationSelectors[0].Namespaces[0] = "a_b" }, "spec.destinationSelectors[0].namespaces[0]", field.ErrorTypeInvalid},
		"bad selector name":  {func(p *TrafficPolicy) { p.Spec.DestinationSelectors[0].Names[0] = "-x" }, "spec.destinationSelectors[0].names[0]", field.ErrorTypeInvalid},
		"bad selector label": {func(p *TrafficPolicy) { p.Spec.DestinationSelectors[0].Labels = map[string]string{"app": "a b"} }, "spec.destinationSelectors[0].labels", field.ErrorTypeInvalid},
		"no rules":           {func(p *TrafficPolicy) { p.Spec.HTTP = nil }, "spec.http", field.ErrorTypeRequired},
		"empty rule":         {func(p *TrafficPolicy) { p.Spec.HTTP[0] = HTTPRule{} }, "spec.http[0]", field.ErrorTypeRequired},
		"bad rule name":      {func(p *TrafficPolicy) { p.Spec.HTTP[0].Name = "Rule_1" }, "spec.http[0].name", field.ErrorTypeInvalid},
		"duplicate rule name": {func(p *TrafficPolicy) {
			p.Spec.HTTP = append(p.Spec.HTTP, HTTPRule{Name: "reviews", Timeout: dur(time.Second)})
		}, "spec.http[1].name", field.ErrorTypeDuplicate},
		"path without slash":  {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Path.Value = "reviews" }, "spec.http[0].matches[0].path.value", field.ErrorTypeInvalid},
		"exact without slash": {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Path = &PathMatch{Type: MatchExact, Value: "x"} }, "spec.http[0].matches[0].path.value", field.ErrorTypeInvalid},
		"bad path regex":      {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Path = &PathMatch{Type: MatchRegex, Value: "/(a"} }, "spec.http[0].matches[0].path.value", field.ErrorTypeInvalid},
		"empty path regex":    {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Path = &PathMatch{Type: MatchRegex} }, "spec.http[0].matches[0].path.value", field.ErrorTypeRequired},
		"present path":        {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Path.Type = MatchPresent }, "spec.http[0].matches[0].path.type", field.ErrorTypeNotSupported},
		"bad method":          {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Method = "get" }, "spec.http[0].matches[0].method", field.ErrorTypeNotSupported},
		"bad header name":     {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Headers[0].Name = "x user" }, "spec.http[0].matches[0].headers[0].name", field.ErrorTypeInvalid},
		"empty header name":   {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Headers[0].Name = "" }, "spec.http[0].matches[0].headers[0].name", field.ErrorTypeRequired},
		"bad header type":     {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Headers[0].Type = "Suffix" }, "spec.http[0].matches[0].headers[0].type", field.ErrorTypeNotSupported},
		"bad header regex": {func(p *TrafficPolicy) {
			p.Spec.HTTP[0].Matches[0].Headers[0] = HeaderMatch{Name: "x", Type: MatchRegex, Value: "[a-"}
		}, "spec.http[0].matches[0].headers[0].value", field.ErrorTypeInvalid},
		"present header value": {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].Headers[0].Type = MatchPresent }, "spec.http[0].matches[0].headers[0].value", field.ErrorTypeForbidden},
		"empty query name":     {func(p *TrafficPolicy) { p.Spec.HTTP[0].Matches[0].QueryParams[0].Name = "" }, "spec.http[0].matches[0].queryParams[0].name", field.ErrorTypeRequired},
		"prefix query": {func(p *TrafficPolicy) {
			p.Spec.HTTP[0].Matches[0].QueryParams[0] = QueryParamMatch{Name: "q", Type: MatchPrefix, Value: "a"}
		}, "spec.http[0].matches[0].queryParams[0].type", field.ErrorTypeNotSupported},
		"negative weight": {func(p *TrafficPolicy) {
			p.Spec.HTTP[0].Route[1].Weight = -1
		}, "spec.http[0].route[1].weight", field.ErrorTypeInvalid},
		"weight over 100": {func(p *TrafficPolicy) {
			p.Spec.HTTP[0].Route[1].Weight = 101
		}, "spec.http[0].route[1].weight", field.ErrorTypeInvalid},
		"weights sum to 90": {func(p *TrafficPolicy) { p.Spec.HTTP[0].Route[2].Weight = 10 }, "spec.http[0].route", field.ErrorTypeInvalid},
		"no destination": {func(p *TrafficPolicy) {
			p.Spec.HTTP[0].Route[0].Destination = Destination{}
		}, "spec.http[0].route[0]", field.ErrorTypeRequired},
		"both destinations": {func(p *TrafficPolicy) {
			p.Spec.HTTP[0].Route[0].VirtualDestination = &VirtualDestinationRef{Name: "x"}
		}, "spec.http[0].route[0].virtualDestination", field.ErrorTypeForbidden},
		"service without cluster": {func(p *TrafficPolicy) { p.Spec.HTTP[0].Route[0].Service.Cluster = "" }, "spec.http[0].route[0].service.cluster", field.ErrorTypeRequired},
		"service bad namespace":   {func(p *TrafficPolicy) { p.Spec.HTTP[0].Route[0].Service.Namespace = "Bookinfo" }, "spec.http[0].route[0].service.namespace", field.ErrorTypeInvalid},
		"service without name":    {func(p *TrafficPolicy) { p.Spec.HTTP[0].Route[0].Service.Name = "" }, "spec.http[0].route[0].service.name", field.ErrorTypeRequired},
		"service bad port":        {func(p *TrafficPolicy) { p.Spec.HTTP[0].Route[0].Service.Port = 70000 }, "spec.http[0].route[0].service.port", field.ErrorTypeInvalid},
		"bad subset label":        {func(p *TrafficPolicy) { p.Spec.HTTP[0].Route[0].Subset = map[string]string{"ver sion": "v1"} }, "spec.http[0].route[0].subset", field.ErrorTypeInvalid},
		"vd without name":         {func(p *TrafficPolicy) { p.Spec.HTTP[0].Route[2].VirtualDestination.Name = "" }, "spec.http[0].route[2].virtualDestination.name", field.ErrorTypeRequired},
		"vd bad namespace":        {func(p *TrafficPolicy) { p.Spec.HTTP[0].Route[2].VirtualDestination.Namespace = "A" }, "spec.http[0].route[2].virtualDestination.namespace", field.ErrorTypeInvalid},
		"vd bad port":             {func(p *TrafficPolicy) { p.Spec.HTTP[0].Route[2].VirtualDestination.Port = -1 }, "spec.http[0].route[2].virtualDestination.port", field.ErrorTypeInvalid},
		"zero timeout":            {func(p *TrafficPolicy) { p.Spec.HTTP[0].Timeout = dur(0) }, "spec.http[0].timeout", field.ErrorTypeInvalid},
		"negative timeout":        {func(p *TrafficPolicy) { p.Spec.HTTP[0].Timeout = dur(-time.Second) }, "spec.http[0].timeout", field.ErrorTypeInvalid},
		"too many attempts":       {func(p *TrafficPolicy) { p.Spec.HTTP[0].Retries.Attempts = 11 }, "spec.http[0].retries.attempts", field.ErrorTypeInvalid},
		"negative attempts":       {func(p *TrafficPolicy) { p.Spec.HTTP[0].Retries.Attempts = -1 }, "spec.http[0].retries.attempts", field.ErrorTypeInvalid},
		"zero per-try timeout":    {func(p *TrafficPolicy) { p.Spec.HTTP[0].Retries.PerTryTimeout = dur(0) }, "spec.http[0].retries.perTryTimeout", field.ErrorTypeInvalid},
		"per-try over timeout":    {func(p *TrafficPolicy) { p.Spec.HTTP[0].Retries.PerTryTimeout = dur(5 * time.Second) }, "spec.http[0].retries.perTryTimeout", field.ErrorTypeInvalid},
		"bad retry condition":     {func(p *TrafficPolicy) { p.Spec.HTTP[0].Retries.RetryOn[1] = "sometimes" }, "spec.http[0].retries.retryOn[1]", field.ErrorTypeNotSupported},
		"duplicate retry cond":    {func(p *TrafficPolicy) { p.Spec.HTTP[0].Retries.RetryOn[1] = "5xx" }, "spec.http[0].retries.retryOn[1]", field.ErrorTypeDuplicate},
		"empty fault":             {func(p *TrafficPolicy) { p.Spec.HTTP[0].Fault = &FaultInjection{} }, "spec.http[0].fault", field.ErrorTypeRequired},
		"delay percent":           {func(p *TrafficPolicy) { p.Spec.HTTP[0].Fault.Delay.Percent = 101 }, "spec.http[0].fault.delay.percent", field.ErrorTypeInvalid},
		"zero delay":              {func(p *TrafficPolicy) { p.Spec.HTTP[0].Fault.Delay.FixedDelay = metav1.Duration{} }, "spec.http[0].fault.delay.fixedDelay", field.ErrorTypeInvalid},
		"abort percent":           {func(p *TrafficPolicy) { p.Spec.HTTP[0].Fault.Abort.Percent = -5 }, "spec.http[0].fault.abort.percent", field.ErrorTypeInvalid},
		"abort status low":        {func(p *TrafficPolicy) { p.Spec.HTTP[0].Fault.Abort.HTTPStatus = 199 }, "spec.http[0].fault.abort.httpStatus", field.ErrorTypeInvalid},
		"abort status high":       {func(p *TrafficPolicy) { p.Spec.HTTP[0].Fault.Abort.HTTPStatus = 600 }, "spec.http[0].fault.abort.httpStatus", field.ErrorTypeInvalid},
		"mirror no destination":   {func(p *TrafficPolicy) { p.Spec.HTTP[0].Mirror.Destination = Destination{} }, "spec.http[0].mirror.destination", field.ErrorTypeRequired},
		"mirror bad cluster":      {func(p *TrafficPolicy) { p.Spec.HTTP[0].Mirror.Destination.Service.Cluster = "we st" }, "spec.http[0].mirror.destination.service.cluster", field.ErrorTypeInvalid},
		"mirror percent":          {func(p *TrafficPolicy) { p.Spec.HTTP[0].Mirror.Percent = int32p(200) }, "spec.http[0].mirror.percent", field.ErrorTypeInvalid},
		"bad set header":          {func(p *TrafficPolicy) { p.Spec.HTTP[0].Headers.Request.Set[0].Name = "x:a" }, "spec.http[0].headers.request.set[0].name", field.ErrorTypeInvalid},
		"bad add header":          {func(p *TrafficPolicy) { p.Spec.HTTP[0].Headers.Request.Add[0].Name = "" }, "spec.http[0].headers.request.add[0].name", field.ErrorTypeRequired},
		"bad remove header":       {func(p *TrafficPolicy) { p.Spec.HTTP[0].Headers.Response.Remove[0] = "a b" }, "spec.http[0].headers.response.remove[0]", field.ErrorTypeInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := validTrafficPolicy()
			tc.mutate(p)
			wantOne(t, p.Validate(), tc.path, tc.typ)
		})
	}
}

func TestTrafficPolicyWeights(t *testing.T) {
	tests := map[string]struct {
		weights []int32
		valid   bool
	}{
		"sum to 100":        {[]int32{50, 30, 20}, true},
		"all omitted":       {[]int32{0, 0, 0}, true},
		"single omitted":    {[]int32{0}, true},
		"single 100":        {[]int32{100}, true},
		"draining one":      {[]int32{100, 0}, true},
		"single 50":         {[]int32{50}, false},
		"sum over 100":      {[]int32{60, 60}, false},
		"some omitted only": {[]int32{50, 0, 0}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := validTrafficPolicy()
			p.Spec.HTTP[0].Route = nil
			for _, w := range tc.weights {
				p.Spec.HTTP[0].Route = append(p.Spec.HTTP[0].Route,
					WeightedDestination{Destination: Destination{Service: svc("east", "reviews")}, Weight: w})
			}
			errs := p.Validate()
			if tc.valid && len(errs) != 0 {
				t.Errorf("Validate(weights %v) = %v, want none", tc.weights, errs)
			}
			if !tc.valid {
				wantOne(t, errs, "spec.http[0].route", field.ErrorTypeInvalid)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	tests := map[string]struct {
		policy Policy
		want   string
	}{
		"weight": {func() Policy {
			p := validTrafficPolicy()
			p.Spec.HTTP[0].Route[1].Weight = -1
			return p
		}(), "spec.http[0].route[1].weight: Invalid value: -1: must be between 0 and 100"},
		"weight sum": {func() Policy {
			p := validTrafficPolicy()
			p.Spec.HTTP[0].Route[0].Weight = 40
			return p
		}(), "spec.http[0].route: Invalid value: 90: weights must sum to 100, or all be omitted for an equal split"},
		"abort status": {func() Policy {
			p := validTrafficPolicy()
			p.Spec.HTTP[0].Fault.Abort.HTTPStatus = 700
			return p
		}(), "spec.http[0].fault.abort.httpStatus: Invalid value: 700: must be between 200 and 599"},
		"outlier detection": {func() Policy {
			p := validVirtualDestination()
			p.Spec.OutlierDetection = nil
			return p
		}(), "spec.outlierDetection: Required value: failover needs outlier detection to eject unhealthy endpoints"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := tc.policy.Validate()
			if len(errs) != 1 || errs[0].Error() != tc.want {
				t.Errorf("Validate() = %v, want [%s]", errs, tc.want)
			}
		})
	}
}

func TestAccessPolicyValidate(t *testing.T) {
	tests := map[string]struct {
		mutate func(*AccessPolicy)
		path   string
		typ    field.ErrorType
	}{
		"missing name":       {func(p *AccessPolicy) { p.Name = "" }, "metadata.name", field.ErrorTypeRequired},
		"no selectors":       {func(p *AccessPolicy) { p.Spec.DestinationSelectors = nil }, "spec.destinationSelectors", field.ErrorTypeRequired},
		"bad selector name":  {func(p *AccessPolicy) { p.Spec.DestinationSelectors[0].Names[0] = "Reviews" }, "spec.destinationSelectors[0].names[0]", field.ErrorTypeInvalid},
		"bad action":         {func(p *AccessPolicy) { p.Spec.Action = "Deny" }, "spec.action", field.ErrorTypeNotSupported},
		"allow without from": {func(p *AccessPolicy) { p.Spec.From = nil }, "spec.from", field.ErrorTypeRequired},
		"empty client":       {func(p *AccessPolicy) { p.Spec.From = append(p.Spec.From, ClientSelector{}) }, "spec.from[1]", field.ErrorTypeRequired},
		"sa bad cluster": {func(p *AccessPolicy) {
			p.Spec.From[0].ServiceAccounts[0].Cluster = "East"
		}, "spec.from[0].serviceAccounts[0].cluster", field.ErrorTypeInvalid},
		"sa no namespace": {func(p *AccessPolicy) {
			p.Spec.From[0].ServiceAccounts[0].Namespace = ""
		}, "spec.from[0].serviceAccounts[0].namespace", field.ErrorTypeRequired},
		"sa no name": {func(p *AccessPolicy) {
			p.Spec.From[0].ServiceAccounts[0].Name = ""
		}, "spec.from[0].serviceAccounts[0].name", field.ErrorTypeRequired},
		"sa bad name": {func(p *AccessPolicy) {
			p.Spec.From[0].ServiceAccounts[0].Name = "Product_Page"
		}, "spec.from[0].serviceAccounts[0].name", field.ErrorTypeInvalid},
		"client bad namespace": {func(p *AccessPolicy) { p.Spec.From[0].Namespaces[0] = "x.y" }, "spec.from[0].namespaces[0]", field.ErrorTypeInvalid},
		"client bad cluster":   {func(p *AccessPolicy) { p.Spec.From[0].Clusters[0] = "" }, "spec.from[0].clusters[0]", field.ErrorTypeRequired},
		"port zero":            {func(p *AccessPolicy) { p.Spec.Ports = []int32{9080, 0} }, "spec.ports[1]", field.ErrorTypeInvalid},
		"port too big":         {func(p *AccessPolicy) { p.Spec.Ports[0] = 65536 }, "spec.ports[0]", field.ErrorTypeInvalid},
		"duplicate port":       {func(p *AccessPolicy) { p.Spec.Ports = []int32{9080, 9080} }, "spec.ports[1]", field.ErrorTypeDuplicate},
		"bad method":           {func(p *AccessPolicy) { p.Spec.Methods[0] = "FETCH" }, "spec.methods[0]", field.ErrorTypeNotSupported},
		"duplicate method":     {func(p *AccessPolicy) { p.Spec.Methods = []HTTPMethod{"GET", "GET"} }, "spec.methods[1]", field.ErrorTypeDuplicate},
		"relative path":        {func(p *AccessPolicy) { p.Spec.Paths[0] = "reviews" }, "spec.paths[0]", field.ErrorTypeInvalid},
		"inner star":           {func(p *AccessPolicy) { p.Spec.Paths[1] = "/a*/b" }, "spec.paths[1]", field.ErrorTypeInvalid},
		"duplicate path":       {func(p *AccessPolicy) { p.Spec.Paths[1] = "/reviews*" }, "spec.paths[1]", field.ErrorTypeDuplicate},
		"deny all with from": {func(p *AccessPolicy) {
			p.Spec.Action, p.Spec.Ports, p.Spec.Methods, p.Spec.Paths = ActionDenyAll, nil, nil, nil
		}, "spec.from", field.ErrorTypeForbidden},
		"deny all with paths": {func(p *AccessPolicy) {
			p.Spec.Action, p.Spec.From, p.Spec.Ports, p.Spec.Methods = ActionDenyAll, nil, nil, nil
		}, "spec.paths", field.ErrorTypeForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := validAccessPolicy()
			tc.mutate(p)
			wantOne(t, p.Validate(), tc.path, tc.typ)
		})
	}
}

func TestAccessPolicyDenyAllValid(t *testing.T) {
	p := &AccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default-deny"},
		Spec: AccessPolicySpec{
			DestinationSelectors: []DestinationSelector{{Namespaces: []string{"bookinfo"}}},
			Action:               ActionDenyAll,
		},
	}
	if errs := p.Validate(); len(errs) != 0 {
		t.Errorf("Validate() = %v, want none", errs)
	}
	p.Spec.Action = "" // defaults to Allow, which needs clients
	wantOne(t, p.Validate(), "spec.from", field.ErrorTypeRequired)
}

func TestVirtualDestinationValidate(t *testing.T) {
	tests := map[string]struct {
		mutate func(*VirtualDestination)
		path   string
		typ    field.ErrorType
	}{
		"missing name":       {func(p *VirtualDestination) { p.Name = "" }, "metadata.name", field.ErrorTypeRequired},
		"no hostname":        {func(p *VirtualDestination) { p.Spec.Hostname = "" }, "spec.hostname", field.ErrorTypeRequired},
		"upper hostname":     {func(p *VirtualDestination) { p.Spec.Hostname = "Reviews.global" }, "spec.hostname", field.ErrorTypeInvalid},
		"wildcard hostname":  {func(p *VirtualDestination) { p.Spec.Hostname = "*.global" }, "spec.hostname", field.ErrorTypeInvalid},
		"trailing dot":       {func(p *VirtualDestination) { p.Spec.Hostname = "reviews.global." }, "spec.hostname", field.ErrorTypeInvalid},
		"no ports":           {func(p *VirtualDestination) { p.Spec.Ports = nil }, "spec.ports", field.ErrorTypeRequired},
		"port zero":          {func(p *VirtualDestination) { p.Spec.Ports[0].Number = 0 }, "spec.ports[0].number", field.ErrorTypeInvalid},
		"duplicate port":     {func(p *VirtualDestination) { p.Spec.Ports = append(p.Spec.Ports, p.Spec.Ports[0]) }, "spec.ports[1].number", field.ErrorTypeDuplicate},
		"no protocol":        {func(p *VirtualDestination) { p.Spec.Ports[0].Protocol = "" }, "spec.ports[0].protocol", field.ErrorTypeRequired},
		"bad protocol":       {func(p *VirtualDestination) { p.Spec.Ports[0].Protocol = "http" }, "spec.ports[0].protocol", field.ErrorTypeNotSupported},
		"bad target port":    {func(p *VirtualDestination) { p.Spec.Ports[0].TargetPort = 65536 }, "spec.ports[0].targetPort", field.ErrorTypeInvalid},
		"no backends":        {func(p *VirtualDestination) { p.Spec.Services = nil; p.Spec.Failover = nil }, "spec.services", field.ErrorTypeRequired},
		"service no cluster": {func(p *VirtualDestination) { p.Spec.Services[0].Cluster = ""; p.Spec.Failover = nil }, "spec.services[0].cluster", field.ErrorTypeRequired},
		"service bad ns":     {func(p *VirtualDestination) { p.Spec.Services[1].Namespace = "Bookinfo" }, "spec.services[1].namespace", field.ErrorTypeInvalid},
		"service no name":    {func(p *VirtualDestination) { p.Spec.Services[1].Name = "" }, "spec.services[1].name", field.ErrorTypeRequired},
		"duplicate service": {func(p *VirtualDestination) {
			p.Spec.Services[1].Cluster = "east"
			p.Spec.Failover.Priority = []string{"east"}
		}, "spec.services[1]", field.ErrorTypeDuplicate},
		"bad selector label": {func(p *VirtualDestination) {
			p.Spec.DestinationSelectors = []DestinationSelector{{Labels: map[string]string{"a b": "x"}}}
		}, "spec.destinationSelectors[0].labels", field.ErrorTypeInvalid},
		"no failover mode":    {func(p *VirtualDestination) { p.Spec.Failover.Mode = "" }, "spec.failover.mode", field.ErrorTypeRequired},
		"bad failover mode":   {func(p *VirtualDestination) { p.Spec.Failover.Mode = "RoundRobin" }, "spec.failover.mode", field.ErrorTypeNotSupported},
		"priority empty":      {func(p *VirtualDestination) { p.Spec.Failover.Priority = nil }, "spec.failover.priority", field.ErrorTypeRequired},
		"priority duplicate":  {func(p *VirtualDestination) { p.Spec.Failover.Priority = []string{"east", "east"} }, "spec.failover.priority[1]", field.ErrorTypeDuplicate},
		"priority bad name":   {func(p *VirtualDestination) { p.Spec.Failover.Priority[1] = "West" }, "spec.failover.priority[1]", field.ErrorTypeInvalid},
		"priority no backend": {func(p *VirtualDestination) { p.Spec.Failover.Priority[1] = "north" }, "spec.failover.priority[1]", field.ErrorTypeInvalid},
		"locality with list":  {func(p *VirtualDestination) { p.Spec.Failover.Mode = FailoverLocality }, "spec.failover.priority", field.ErrorTypeForbidden},
		"failover no outlier": {func(p *VirtualDestination) { p.Spec.OutlierDetection = nil }, "spec.outlierDetection", field.ErrorTypeRequired},
		"consecutive errors":  {func(p *VirtualDestination) { p.Spec.OutlierDetection.ConsecutiveErrors = 0 }, "spec.outlierDetection.consecutiveErrors", field.ErrorTypeInvalid},
		"zero interval":       {func(p *VirtualDestination) { p.Spec.OutlierDetection.Interval = metav1.Duration{} }, "spec.outlierDetection.interval", field.ErrorTypeInvalid},
		"negative ejection":   {func(p *VirtualDestination) { p.Spec.OutlierDetection.BaseEjectionTime = *dur(-time.Second) }, "spec.outlierDetection.baseEjectionTime", field.ErrorTypeInvalid},
		"ejection percent":    {func(p *VirtualDestination) { p.Spec.OutlierDetection.MaxEjectionPercent = 101 }, "spec.outlierDetection.maxEjectionPercent", field.ErrorTypeInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := validVirtualDestination()
			tc.mutate(p)
			wantOne(t, p.Validate(), tc.path, tc.typ)
		})
	}
}

func TestVirtualDestinationSelectorsOnly(t *testing.T) {
	p := validVirtualDestination()
	p.Spec.Services = nil
	p.Spec.DestinationSelectors = []DestinationSelector{{Namespaces: []string{"bookinfo"}, Names: []string{"reviews"}}}
	p.Spec.Failover.Priority = []string{"north", "east"} // clusters cannot be checked against a selector
	if errs := p.Validate(); len(errs) != 0 {
		t.Errorf("Validate() = %v, want none", errs)
	}
	p.Spec.Failover = &Failover{Mode: FailoverLocality}
	if errs := p.Validate(); len(errs) != 0 {
		t.Errorf("Validate() with locality failover = %v, want none", errs)
	}
}

// TestExamplePolicies keeps the shared examples in testdata/policies decodable and valid.
func TestExamplePolicies(t *testing.T) {
	files, err := filepath.Glob("../../../testdata/policies/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("glob testdata/policies = %v, %v; want files", files, err)
	}
	kinds := map[string]int{}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			policies, err := Decode(data)
			if err != nil {
				t.Fatalf("Decode(%s) error: %v", file, err)
			}
			for _, p := range policies {
				kinds[p.GetObjectKind().GroupVersionKind().Kind]++
				if p.GetNamespace() != "bookinfo" {
					t.Errorf("%s namespace = %q, want bookinfo", p.GetName(), p.GetNamespace())
				}
				if errs := p.Validate(); len(errs) != 0 {
					t.Errorf("%s: Validate() = %v", p.GetName(), errs)
				}
			}
		})
	}
	for _, kind := range []string{KindTrafficPolicy, KindAccessPolicy, KindVirtualDestination} {
		if kinds[kind] == 0 {
			t.Errorf("testdata/policies has no %s (kinds %v)", kind, kinds)
		}
	}
}
