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
	"google.golang.org/grpc/codes"
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

// Register trades a relay identity token and a CSR for a client
// certificate. Under mTLS the token is consumed unless the cluster was
// registered with reusable tokens.
func (r *registration) Register(ctx context.Context, req *relayv1.RegisterRequest) (*relayv1.Certificate, error) {
	s := r.s
	addr := peerHost(ctx)
	if err := pki.ValidateClusterName(req.GetCluster()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register: %v", err)
	}
	if _, _, err := s.checkToken(ctx, req.GetCluster(), req.GetToken()); err != nil {
		s.log.Warn("registration refused", "cluster", req.GetCluster(), "peer", addr, "error", err)
		return nil, s.refuseToken(addr, req.GetCluster(), err)
	}
	chain, serial, notAfter, err := s.ca.SignClusterCSR(req.GetCsr(), req.GetCluster(), s.opts.CertTTL)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "sign certificate request: %v", err)
	}
	// The token is checked again in the same compare-and-set as the
	// serial is recorded, so a token is consumed exactly once and a
	// concurrent deregistration wins.
	_, err = store.UpdateCluster(ctx, s.deps.Store, req.GetCluster(), func(c *store.Cluster, found bool) error {
		how := s.tokenMatch(*c, found, req.GetToken())
		if how == "" {
			return status.Errorf(codes.Unauthenticated, "invalid relay identity token for cluster %q", req.GetCluster())
		}
		if how == "own" && !c.TokenReusable && s.authMode() == ModeMTLS {
			c.TokenHash, c.TokenExpires = nil, time.Time{}
		}
		c.Serials = appendSerial(c.Serials, serial)
		return nil
	})
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Errorf(codes.Unavailable, "record certificate: %v", err)
		}
		return nil, err
	}
	s.m.registrations.Inc()
	s.log.Info("cluster registered", "cluster", req.GetCluster(), "peer", addr)
	return &relayv1.Certificate{Chain: chain, CaBundle: s.ca.BundlePEM(), NotAfter: timestamppb.New(notAfter)}, nil
}

// Renew issues a fresh certificate to the cluster named by the caller's
// client certificate, which must be the cluster's current one: registered,
// unexpired, and the last issued.
func (r *registration) Renew(ctx context.Context, req *relayv1.RenewRequest) (*relayv1.Certificate, error) {
	s := r.s
	id, ok, err := peerIdentity(ctx)
	if !ok || err != nil {
		s.m.authFailures.WithLabelValues("no_certificate").Inc()
		return nil, status.Error(codes.Unauthenticated, "a client certificate is required (connect over mTLS)")
	}
	if _, err := s.checkIdentity(ctx, id); err != nil {
		return nil, err
	}
	chain, serial, notAfter, err := s.ca.SignClusterCSR(req.GetCsr(), id.cluster, s.opts.CertTTL)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "sign certificate request: %v", err)
	}
	_, err = store.UpdateCluster(ctx, s.deps.Store, id.cluster, func(c *store.Cluster, found bool) error {
		if !found || c.Revoked {
			s.m.authFailures.WithLabelValues("revoked").Inc()
			return status.Errorf(codes.PermissionDenied, "cluster %q is not registered", id.cluster)
		}
		if len(c.Serials) == 0 || c.Serials[len(c.Serials)-1] != id.serial {
			s.m.authFailures.WithLabelValues("stale_certificate").Inc()
			return status.Errorf(codes.PermissionDenied, "certificate %s is not cluster %q's current one; only the current certificate renews", id.serial, id.cluster)
		}
		c.Serials = appendSerial(c.Serials, serial)
		return nil
	})
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Errorf(codes.Unavailable, "record certificate: %v", err)
		}
		return nil, err
	}
	return &relayv1.Certificate{Chain: chain, CaBundle: s.ca.BundlePEM(), NotAfter: timestamppb.New(notAfter)}, nil
}

// appendSerial adds a serial, keeping the last maxSerials.
func appendSerial(serials []string, serial string) []string {
	serials = append(serials, serial)
	if len(serials) > maxSerials {
		serials = slices.Clone(serials[len(serials)-maxSerials:])
	}
	return serials
}

// checkToken verifies a relay identity token for cluster in constant time.
// Unknown clusters, revoked ones and wrong or expired tokens get the same
// Unauthenticated answer, so the answer tells nothing about which clusters
// exist. how is "own" or "shared".
func (s *Server) checkToken(ctx context.Context, cluster, token string) (store.Cluster, string, error) {
	c, err := s.deps.Store.GetCluster(ctx, cluster)
	refuse := status.Errorf(codes.Unauthenticated, "invalid relay identity token for cluster %q", cluster)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.m.authFailures.WithLabelValues("unknown_cluster").Inc()
		pki.TokenMatches(make([]byte, 32), token) // same work as a real comparison
		return c, "", refuse
	case err != nil:
		return c, "", status.Errorf(codes.Unavailable, "look up cluster: %v", err)
	case c.Revoked:
		s.m.authFailures.WithLabelValues("revoked").Inc()
		return c, "", refuse
	}
	how := s.tokenMatch(c, true, token)
	if how == "" {
		reason := "wrong_token"
		if !c.TokenExpires.IsZero() && !time.Now().Before(c.TokenExpires) {
			reason = "expired_token"
		}
		s.m.authFailures.WithLabelValues(reason).Inc()
		return c, "", refuse
	}
	return c, how, nil
}

// tokenMatch says whether token is valid for the record c: "own" for the
// cluster's unexpired token, "shared" for the shared token when the
// cluster was registered for it, "" otherwise.
func (s *Server) tokenMatch(c store.Cluster, found bool, token string) string {
	if !found || c.Revoked {
		return ""
	}
	own := len(c.TokenHash) > 0 && pki.TokenMatches(c.TokenHash, token)
	if own && (c.TokenExpires.IsZero() || time.Now().Before(c.TokenExpires)) {
		return "own"
	}
	if s.sharedHash != nil && c.SharedToken && pki.TokenMatches(s.sharedHash, token) {
		return "shared"
	}
	return ""
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
// certificate, checked against the registry.
func (s *Server) peerCluster(ctx context.Context) (identity, error) {
	id, ok, err := peerIdentity(ctx)
	if !ok {
		s.m.authFailures.WithLabelValues("no_certificate").Inc()
		return id, status.Error(codes.Unauthenticated, "a client certificate is required (connect over mTLS)")
	}
	if err != nil {
		s.m.authFailures.WithLabelValues("no_certificate").Inc()
		return id, status.Errorf(codes.Unauthenticated, "a client certificate is required: %v", err)
	}
	if _, err := s.checkIdentity(ctx, id); err != nil {
		return id, err
	}
	return id, nil
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
