package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrafficPolicy shapes the HTTP traffic sent to the destinations it selects:
// matching, weighted routing across subsets and clusters, retries, timeouts,
// fault injection, mirroring and header manipulation.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tp,categories=meshrelay
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TrafficPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TrafficPolicySpec `json:"spec"`
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// TrafficPolicySpec is the desired behaviour of a TrafficPolicy.
type TrafficPolicySpec struct {
	// DestinationSelectors select the destinations whose traffic this policy
	// shapes; a destination selected by any selector is affected.
	// +kubebuilder:validation:MinItems=1
	DestinationSelectors []DestinationSelector `json:"destinationSelectors"`
	// HTTP rules, evaluated in order; the first whose matches match the
	// request applies.
	// +kubebuilder:validation:MinItems=1
	HTTP []HTTPRule `json:"http"`
}

// HTTPRule is one ordered routing rule.
type HTTPRule struct {
	// Name identifies the rule in diagnostics and generated resources.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Name string `json:"name,omitempty"`
	// Matches are ORed; empty matches every request.
	// +optional
	Matches []HTTPMatch `json:"matches,omitempty"`
	// Route splits matching traffic across weighted destinations. Weights
	// must sum to 100, or all be omitted (0) for an equal split. Empty sends
	// traffic to the destination it was addressed to.
	// +optional
	Route []WeightedDestination `json:"route,omitempty"`
	// Retries of failed requests.
	// +optional
	Retries *RetryPolicy `json:"retries,omitempty"`
	// Timeout for the whole request, retries included.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Fault injects delays and aborts, for testing resilience.
	// +optional
	Fault *FaultInjection `json:"fault,omitempty"`
	// Mirror copies a share of the traffic to another destination,
	// discarding its responses.
	// +optional
	Mirror *Mirror `json:"mirror,omitempty"`
	// Headers to change on requests and responses.
	// +optional
	Headers *HeaderManipulation `json:"headers,omitempty"`
}

// HTTPMatch matches a request; all set fields must match.
type HTTPMatch struct {
	// Path matches the request path.
	// +optional
	Path *PathMatch `json:"path,omitempty"`
	// Method matches the request method.
	// +optional
	Method HTTPMethod `json:"method,omitempty"`
	// Headers must all match.
	// +optional
	Headers []HeaderMatch `json:"headers,omitempty"`
	// QueryParams must all match.
	// +optional
	QueryParams []QueryParamMatch `json:"queryParams,omitempty"`
}

// MatchType is how a value is compared. Each field of this type lists the
// types it accepts.
type MatchType string

// Match types. Regular expressions use RE2 syntax and must match the whole value.
const (
	MatchExact   MatchType = "Exact"
	MatchPrefix  MatchType = "Prefix"
	MatchRegex   MatchType = "RegularExpression"
	MatchPresent MatchType = "Present"
)

// PathMatch matches the request path.
type PathMatch struct {
	// Type is Exact, Prefix (default) or RegularExpression.
	// +kubebuilder:validation:Enum=Exact;Prefix;RegularExpression
	// +optional
	Type MatchType `json:"type,omitempty"`
	// Value is the path, starting with "/", or a regular expression.
	// +kubebuilder:validation:MinLength=1
	Value string `json:"value"`
}

// HeaderMatch matches one request header.
type HeaderMatch struct {
	// Name of the header, case-insensitive.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	Name string `json:"name"`
	// Type is Exact (default), Prefix, RegularExpression or Present.
	// +kubebuilder:validation:Enum=Exact;Prefix;RegularExpression;Present
	// +optional
	Type MatchType `json:"type,omitempty"`
	// Value to compare with; must be empty for Present.
	// +optional
	Value string `json:"value,omitempty"`
	// Invert matches requests that do not match.
	// +optional
	Invert bool `json:"invert,omitempty"`
}

// QueryParamMatch matches one query parameter.
type QueryParamMatch struct {
	// Name of the query parameter, case-sensitive.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Type is Exact (default), RegularExpression or Present.
	// +kubebuilder:validation:Enum=Exact;RegularExpression;Present
	// +optional
	Type MatchType `json:"type,omitempty"`
	// Value to compare with; must be empty for Present.
	// +optional
	Value string `json:"value,omitempty"`
}

// HTTPMethod is an HTTP request method.
// +kubebuilder:validation:Enum=GET;HEAD;POST;PUT;DELETE;PATCH;OPTIONS;TRACE;CONNECT
type HTTPMethod string

// Destination is where traffic goes: exactly one of Service or
// VirtualDestination, optionally narrowed to a subset of its endpoints.
type Destination struct {
	// Service is a Service in one cluster.
	// +optional
	Service *ServiceRef `json:"service,omitempty"`
	// VirtualDestination is a global service over several clusters.
	// +optional
	VirtualDestination *VirtualDestinationRef `json:"virtualDestination,omitempty"`
	// Subset selects the endpoints (pods) carrying all these labels, e.g. version: v2.
	// +optional
	Subset map[string]string `json:"subset,omitempty"`
}

// WeightedDestination is a Destination with its share of the traffic.
type WeightedDestination struct {
	Destination `json:",inline"`
	// Weight is the percentage of traffic, 0 to 100.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Weight int32 `json:"weight,omitempty"`
}

// RetryCondition is a condition under which a request is retried.
// +kubebuilder:validation:Enum="5xx";gateway-error;reset;connect-failure;retriable-4xx;refused-stream;cancelled;deadline-exceeded;internal;resource-exhausted;unavailable
type RetryCondition string

// RetryPolicy retries failed requests.
type RetryPolicy struct {
	// Attempts is the number of retries after the first try; 0 disables retries.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	Attempts int32 `json:"attempts"`
	// PerTryTimeout bounds each try; it must not exceed the rule's timeout.
	// +optional
	PerTryTimeout *metav1.Duration `json:"perTryTimeout,omitempty"`
	// RetryOn are the conditions that trigger a retry; empty means 5xx,
	// connect-failure, refused-stream and reset.
	// +optional
	RetryOn []RetryCondition `json:"retryOn,omitempty"`
}

// FaultInjection delays or aborts a share of the requests; at least one of
// Delay and Abort must be set.
type FaultInjection struct {
	// Delay holds requests back before forwarding them.
	// +optional
	Delay *FaultDelay `json:"delay,omitempty"`
	// Abort answers requests with an error instead of forwarding them.
	// +optional
	Abort *FaultAbort `json:"abort,omitempty"`
}

// FaultDelay delays Percent of the requests by FixedDelay.
type FaultDelay struct {
	// Percent of requests delayed, 0 to 100.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Percent int32 `json:"percent"`
	// FixedDelay is how long each is held; it must be positive.
	FixedDelay metav1.Duration `json:"fixedDelay"`
}

// FaultAbort aborts Percent of the requests with HTTPStatus.
type FaultAbort struct {
	// Percent of requests aborted, 0 to 100.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Percent int32 `json:"percent"`
	// HTTPStatus is the status code returned, 200 to 599.
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=599
	HTTPStatus int32 `json:"httpStatus"`
}

// Mirror copies traffic to a destination and discards the responses.
type Mirror struct {
	// Destination receiving the copies.
	Destination Destination `json:"destination"`
	// Percent of requests mirrored, 0 to 100; omitted means 100.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Percent *int32 `json:"percent,omitempty"`
}

// HeaderManipulation changes request and response headers.
type HeaderManipulation struct {
	// Request header changes, made before forwarding.
	// +optional
	Request *HeaderOperations `json:"request,omitempty"`
	// Response header changes, made before answering the client.
	// +optional
	Response *HeaderOperations `json:"response,omitempty"`
}

// HeaderOperations are applied in the order Remove, Set, Add.
type HeaderOperations struct {
	// Set replaces the header's value, adding it if absent.
	// +optional
	Set []HTTPHeader `json:"set,omitempty"`
	// Add appends a value, keeping existing ones.
	// +optional
	Add []HTTPHeader `json:"add,omitempty"`
	// Remove deletes headers by name.
	// +optional
	Remove []string `json:"remove,omitempty"`
}

// HTTPHeader is a header name and value.
type HTTPHeader struct {
	// Name of the header.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	Name string `json:"name"`
	// Value of the header.
	Value string `json:"value"`
}

// TrafficPolicyList is a list of TrafficPolicy.
//
// +kubebuilder:object:root=true
type TrafficPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrafficPolicy `json:"items"`
}
