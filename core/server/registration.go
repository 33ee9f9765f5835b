package server

import (
	"context"
	"errors"
	"net"
	"slices"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxSerials is how many certificate serials a cluster keeps valid at once:
// the current one and those still in use during renewal.
const maxSerials = 4

type registration struct {
	relayv1.UnimplementedRegistrationServer
	s *Server
}

// Register trades a relay identity token and a CSR for a client certificate.
func (r *registration) Register(ctx context.Context, req *relayv1.RegisterRequest) (*relayv1.Certificate, error) {
	s := r.s
	addr := peerHost(ctx)
	if !s.registerAllowed(addr) {
		s.m.authFailures.WithLabelValues("rate_limited").Inc()
		return nil, status.Error(codes.ResourceExhausted, "too many failed registrations from this address; try again later")
	}
	if err := pki.ValidateClusterName(req.GetCluster()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register: %v", err)
	}
	c, err := s.checkToken(ctx, req.GetCluster(), req.GetToken())
	if err != nil {
		s.registerFailed(addr)
		s.log.Warn("registration refused", "cluster", req.GetCluster(), "peer", addr, "error", err)
		return nil, err
	}
	cert, err := s.issue(ctx, c, req.GetCsr())
	if err != nil {
		return nil, err
	}
	s.m.registrations.Inc()
	s.log.Info("cluster registered", "cluster", c.Name, "peer", addr)
	return cert, nil
}

// Renew issues a fresh certificate to the cluster named by the caller's
// client certificate.
func (r *registration) Renew(ctx context.Context, req *relayv1.RenewRequest) (*relayv1.Certificate, error) {
	s := r.s
	cluster, err := s.peerCluster(ctx)
	if err != nil {
		return nil, err
	}
	c, err := s.deps.Store.GetCluster(ctx, cluster)
	if err != nil || c.Revoked {
		s.m.authFailures.WithLabelValues("revoked").Inc()
		return nil, status.Errorf(codes.PermissionDenied, "cluster %q is not registered", cluster)
	}
	return s.issue(ctx, c, req.GetCsr())
}

// issue signs a CSR for a cluster and records the serial.
func (s *Server) issue(ctx context.Context, c store.Cluster, csr []byte) (*relayv1.Certificate, error) {
	chain, serial, notAfter, err := s.ca.SignClusterCSR(csr, c.Name, s.opts.CertTTL)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "sign certificate request: %v", err)
	}
	c.Serials = append(c.Serials, serial)
	if len(c.Serials) > maxSerials {
		c.Serials = slices.Clone(c.Serials[len(c.Serials)-maxSerials:])
	}
	if err := s.deps.Store.PutCluster(ctx, c); err != nil {
		return nil, status.Errorf(codes.Unavailable, "record certificate: %v", err)
	}
	return &relayv1.Certificate{Chain: chain, CaBundle: s.ca.BundlePEM(), NotAfter: timestamppb.New(notAfter)}, nil
}

// checkToken verifies a relay identity token for cluster in constant time.
// Unknown clusters, revoked ones and wrong or expired tokens get the same
// Unauthenticated answer, so the answer tells nothing about which clusters exist.
func (s *Server) checkToken(ctx context.Context, cluster, token string) (store.Cluster, error) {
	c, err := s.deps.Store.GetCluster(ctx, cluster)
	refuse := status.Errorf(codes.Unauthenticated, "invalid relay identity token for cluster %q", cluster)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.m.authFailures.WithLabelValues("unknown_cluster").Inc()
		pki.TokenMatches(make([]byte, 32), token) // same work as a real comparison
		return c, refuse
	case err != nil:
		return c, status.Errorf(codes.Unavailable, "look up cluster: %v", err)
	case c.Revoked:
		s.m.authFailures.WithLabelValues("revoked").Inc()
		return c, refuse
	}
	matches := len(c.TokenHash) > 0 && pki.TokenMatches(c.TokenHash, token)
	if !matches && s.opts.SharedToken != "" {
		matches = pki.TokenMatches(pki.HashToken(s.opts.SharedToken), token)
	}
	if !matches {
		s.m.authFailures.WithLabelValues("wrong_token").Inc()
		return c, refuse
	}
	if !c.TokenExpires.IsZero() && time.Now().After(c.TokenExpires) {
		s.m.authFailures.WithLabelValues("expired_token").Inc()
		return c, status.Errorf(codes.Unauthenticated, "relay identity token for cluster %q expired at %s", cluster, c.TokenExpires.Format(time.RFC3339))
	}
	return c, nil
}

// verifyCluster is the TLS handshake's revocation check: the cluster must be
// registered and the certificate's serial one it was issued.
func (s *Server) verifyCluster(cluster, serial string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.deps.Store.GetCluster(ctx, cluster)
	if err != nil {
		s.m.authFailures.WithLabelValues("unknown_cluster").Inc()
		return errors.New("cluster is not registered")
	}
	if c.Revoked {
		s.m.authFailures.WithLabelValues("revoked").Inc()
		return errors.New("cluster was deregistered")
	}
	if !slices.Contains(c.Serials, serial) {
		s.m.authFailures.WithLabelValues("revoked_certificate").Inc()
		return errors.New("certificate was revoked")
	}
	return nil
}

// peerCluster returns the cluster named by the caller's verified client
// certificate.
func (s *Server) peerCluster(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "a client certificate is required (connect over mTLS)")
	}
	cluster, _, err := pki.ClusterFromConnectionState(info.State)
	if err != nil {
		s.m.authFailures.WithLabelValues("no_certificate").Inc()
		return "", status.Errorf(codes.Unauthenticated, "a client certificate is required: %v", err)
	}
	return cluster, nil
}

func peerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}

// registerAllowed reports whether addr may try to register: each address
// gets RegisterFailures failures per minute.
func (s *Server) registerAllowed(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	lim, ok := s.limiters[addr]
	return !ok || lim.Tokens() >= 1
}

func (s *Server) registerFailed(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lim, ok := s.limiters[addr]
	if !ok {
		n := max(s.opts.RegisterFailures, 1)
		lim = rate.NewLimiter(rate.Every(time.Minute/time.Duration(n)), n)
		s.limiters[addr] = lim
	}
	lim.Allow()
}
