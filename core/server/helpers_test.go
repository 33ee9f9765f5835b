package server

import (
	"crypto/x509"
	"encoding/pem"
	"github.com/meshrelay/meshrelay/core/engine"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// readState returns the agent's stored certificate and key.
func readState(t *testing.T, ta *testAgent) (certPEM, keyPEM []byte) {
	t.Helper()
	dir := filepath.Join(ta.dir, "state")
	var err error
	if certPEM, err = os.ReadFile(filepath.Join(dir, "tls.crt")); err != nil {
		t.Fatal(err)
	}
	if keyPEM, err = os.ReadFile(filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

func notAfter(t *testing.T, certPEM []byte) time.Time {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.NotAfter
}

func engineKey(cluster string) engine.OutputKey {
	return engine.OutputKey{Cluster: cluster, Backend: "test"}
}

var nsGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// The records core/server/trust keeps in the store, as tests read them
// there: a cluster's last report is under trustReportPrefix+cluster, a
// MeshTrust's roots (trustState) under its namespace/name.
const trustReportPrefix = "report/"

// trustState is the part of a MeshTrust's stored roots that tests read.
type trustState struct {
	Current *struct {
		Cert string `json:"cert"`
	} `json:"current"`
	Old *struct {
		Cert string `json:"cert"`
	} `json:"old,omitempty"`
}

// maxTrustCertBytes is the largest intermediate a trust report may carry.
const maxTrustCertBytes = 16 << 10
