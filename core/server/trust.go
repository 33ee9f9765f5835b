package server

import (
	"context"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/server/trust"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// newTrust returns the server's mesh trust manager (core/server/trust):
// it reads the registry and keeps its records in the server's store, seals
// roots with the CA key's secret (cakey.go) and reads a root's Secret
// through the policy source when that can.
func newTrust(s *Server) *trust.Manager {
	secrets, _ := s.deps.Policies.(trust.SecretReader)
	return trust.New(trust.Options{Interval: s.opts.Heartbeat}, trust.Deps{
		Store:   s.deps.Store,
		Fleet:   trustFleet{s},
		Sealer:  rootSealer{s},
		Secrets: secrets,
		Logger:  s.log,
	})
}

var _ trust.SecretReader = (*KubePolicies)(nil)

// trustFleet is what the trust manager reads of the server.
type trustFleet struct{ s *Server }

// Meshes returns the meshes of the clusters of the engine's fleet view.
func (f trustFleet) Meshes() map[string][]string {
	out := map[string][]string{}
	for _, ci := range f.s.engine.Clusters() {
		out[ci.Name] = ci.Meshes
	}
	return out
}

// SafeMode reports whether the server is in safe mode.
func (f trustFleet) SafeMode() bool {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return f.s.safe.on
}

// rootSealer seals mesh roots' keys like the relay CA's (cakey.go).
type rootSealer struct{ s *Server }

// SealCA returns ca's certificates and its key sealed with the CA key's
// secret.
func (r rootSealer) SealCA(ca *pki.CA) (certPEM, sealedKey []byte, err error) {
	key, err := r.s.caKeySecret()
	if err != nil {
		return nil, nil, err
	}
	return sealCA(key, ca)
}

// OpenCA opens a CA sealed by SealCA, or by an earlier release.
func (r rootSealer) OpenCA(certPEM, sealedKey []byte) (*pki.CA, error) {
	key, err := r.s.caKeySecret()
	if err != nil {
		return nil, err
	}
	ca, _, err := openCA(key, certPEM, sealedKey)
	return ca, err
}

// trustService serves the Trust RPCs to agents.
type trustService struct {
	relayv1.UnimplementedTrustServer
	s *Server
}

// caller authenticates a Trust call like a Sync stream: the client
// certificate under mTLS, the cluster and token headers otherwise.
func (ts *trustService) caller(ctx context.Context) (string, error) {
	s := ts.s
	if s.authMode() == ModeMTLS {
		id, err := s.peerCluster(ctx)
		return id.cluster, err
	}
	cluster, tok, ok := streamToken(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "the x-meshrelay-cluster and x-meshrelay-token headers are required")
	}
	if _, _, err := s.checkToken(ctx, cluster, tok); err != nil {
		return "", s.refuseToken(peerHost(ctx), cluster, err)
	}
	return cluster, nil
}

// Report records the cluster's trust and returns its plan.
func (ts *trustService) Report(ctx context.Context, req *relayv1.TrustReport) (*relayv1.TrustPlan, error) {
	cluster, err := ts.caller(ctx)
	if err != nil {
		return nil, err
	}
	return ts.s.trust.Report(ctx, cluster, req)
}

// Sign signs the cluster's intermediate CSR with the signing root.
func (ts *trustService) Sign(ctx context.Context, req *relayv1.TrustSignRequest) (*relayv1.TrustSignResponse, error) {
	cluster, err := ts.caller(ctx)
	if err != nil {
		return nil, err
	}
	return ts.s.trust.Sign(ctx, cluster, req)
}
