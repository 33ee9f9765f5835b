// Package deploy holds the Helm charts (charts/), the generated policy CRDs
// (crds/) and the Dockerfiles (docker/) that install meshrelay, and the
// tests that lint and render the charts and have the real kube-apiserver
// accept the result. README.md explains the install.
package deploy
