package catalog

import (
	corev1 "k8s.io/api/core/v1"
)

// The input kinds as Derive reads them: only the members the rules use,
// with the names and JSON forms of k8s.io/api's types, so that decoding
// skips what it would otherwise build and throw away (a pod template's
// containers, an endpoint's addresses).

// objectMeta is the metadata Derive reads.
type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// service is a corev1.Service.
type service struct {
	objectMeta `json:"metadata"`
	Spec       struct {
		Type     corev1.ServiceType   `json:"type"`
		Selector map[string]string    `json:"selector"`
		Ports    []corev1.ServicePort `json:"ports"`
	} `json:"spec"`
}

// endpointSlice is a discoveryv1.EndpointSlice.
type endpointSlice struct {
	objectMeta `json:"metadata"`
	Endpoints  []endpoint `json:"endpoints"`
}

// endpoint is a discoveryv1.Endpoint.
type endpoint struct {
	Conditions struct {
		Ready *bool `json:"ready"`
	} `json:"conditions"`
	TargetRef *struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"targetRef"`
	NodeName *string `json:"nodeName"`
	Zone     *string `json:"zone"`
}

// workload is an appsv1.Deployment, StatefulSet or DaemonSet (which has
// no replicas: Derive does not read them for one).
type workload struct {
	objectMeta `json:"metadata"`
	Spec       struct {
		Replicas *int32      `json:"replicas"`
		Template podTemplate `json:"template"`
	} `json:"spec"`
}

// podTemplate is a corev1.PodTemplateSpec.
type podTemplate struct {
	objectMeta `json:"metadata"`
	Spec       struct {
		ServiceAccountName       string `json:"serviceAccountName"`
		DeprecatedServiceAccount string `json:"serviceAccount"`
	} `json:"spec"`
}
