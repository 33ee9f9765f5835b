// Package rbaceval evaluates Envoy RBAC policies against a request, as
// Envoy does, for tests: the envoy backend's test that its RBAC means what
// Istio's means, and the cross-backend conformance test. It knows the
// matchers the translators emit and fails the test on any other, so that a
// new matcher is never evaluated wrongly in silence.
package rbaceval
