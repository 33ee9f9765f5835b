//go:build tools

// Package kube records the kube-apiserver command as a dependency of this
// module so that
//
//	go build -o ../../bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
//
// resolves against the versions pinned in go.mod and go.sum. The resulting
// binary is used by internal/testenv to run a real API server in tests.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
