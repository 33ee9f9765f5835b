package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
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
// registered with reusable tokens. The shared token registers a cluster
// only while it holds no valid certificate, and at most once every
// sharedTokenInterval (see sharedTokenRefusal).
func (r *registration) Register(ctx context.Context, req *relayv1.RegisterRequest) (*relayv1.Certificate, error) {
	s := r.s
	addr := peerHost(ctx)
	if err := pki.ValidateClusterName(req.GetCluster()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register: %v", err)
	}
	c, how, err := s.checkToken(ctx, req.GetCluster(), req.GetToken())
	if err != nil {
		s.log.Warn("registration refused", "cluster", req.GetCluster(), "peer", addr, "error", err)
		return nil, s.refuseToken(addr, req.GetCluster(), err)
	}
	if how == "shared" {
		// Checked before signing, so that a refused caller costs no
		// signature, and again in the compare-and-set below.
		if err := sharedTokenRefusal(c, time.Now()); err != nil {
			return nil, s.refuseShared(addr, req.GetCluster(), err)
		}
	}
	chain, serial, notAfter, err := s.ca.SignClusterCSR(req.GetCsr(), req.GetCluster(), s.opts.CertTTL)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "sign certificate request: %v", err)
	}
	// The token is checked again in the same compare-and-set as the
	// serial is recorded, so a token is consumed exactly once, the shared
	// token registers once however many callers race, and a concurrent
	// deregistration wins.
	var refusal error
	_, err = store.UpdateCluster(ctx, s.deps.Store, req.GetCluster(), func(c *store.Cluster, found bool) error {
		how = s.tokenMatch(*c, found, req.GetToken())
		switch how {
		case "":
			return status.Errorf(codes.Unauthenticated, "invalid relay identity token for cluster %q", req.GetCluster())
		case "own":
			if !c.TokenReusable && s.authMode() == ModeMTLS {
				c.TokenHash, c.TokenExpires = nil, time.Time{}
			}
		case "shared":
			now := time.Now()
			if refusal = sharedTokenRefusal(*c, now); refusal != nil {
				return refusal
			}
			c.SharedRegistered, c.SharedRegisteredFrom = now, addr
		}
		c.Serials = appendSerial(c.Serials, serial)
		c.CertExpires = notAfter
		return nil
	})
	if err != nil {
		if refusal != nil && errors.Is(err, refusal) {
			return nil, s.refuseShared(addr, req.GetCluster(), err)
		}
		if _, ok := status.FromError(err); !ok {
			err = status.Errorf(codes.Unavailable, "record certificate: %v", err)
		}
		return nil, err
	}
	s.m.registrations.Inc()
	if how == "shared" {
		s.log.Warn("cluster registered with the shared token", "cluster", req.GetCluster(), "peer", addr, "certificate_expires", notAfter)
	} else {
		s.log.Info("cluster registered", "cluster", req.GetCluster(), "peer", addr)
	}
	return &relayv1.Certificate{Chain: chain, CaBundle: s.ca.BundlePEM(), NotAfter: timestamppb.New(notAfter)}, nil
}

// sharedTokenInterval is how often the shared token may register one
// cluster, across every replica (the time is kept in the registry).
const sharedTokenInterval = time.Minute

// sharedTokenRefusal says why the shared token may not register the
// cluster of record c at now, or returns nil when it may. The shared token
// is known to every cluster that opted into it, so it must not take over a
// cluster whose agent holds a certificate: it registers a cluster only
// while none of its certificates is valid, and at most once every
// sharedTokenInterval. A certificate of unknown expiry counts as valid.
func sharedTokenRefusal(c store.Cluster, now time.Time) error {
	if len(c.Serials) > 0 && (c.CertExpires.IsZero() || now.Before(c.CertExpires)) {
		until := "of unknown expiry"
		if !c.CertExpires.IsZero() {
			until = "until " + c.CertExpires.UTC().Format(time.RFC3339)
		}
		return status.Errorf(codes.FailedPrecondition,
			"cluster %q holds a valid certificate (%s): the shared token registers a cluster only while it holds none; "+
				"its agent renews with its certificate, or an operator issues the cluster's own token (meshrelay cluster register %s)",
			c.Name, until, c.Name)
	}
	if next := c.SharedRegistered.Add(sharedTokenInterval); !c.SharedRegistered.IsZero() && now.Before(next) {
		return status.Errorf(codes.ResourceExhausted,
			"the shared token registered cluster %q at %s; it registers a cluster at most once every %s (next at %s)",
			c.Name, c.SharedRegistered.UTC().Format(time.RFC3339), sharedTokenInterval, next.UTC().Format(time.RFC3339))
	}
	return nil
}

// refuseShared counts and logs a refused registration with the shared
// token. Refusals count as failures against the address and the cluster
// (see tokenFailed), which bounds how often they are logged: a caller
// over the limit gets the same answer without a log line.
func (s *Server) refuseShared(addr, cluster string, err error) error {
	reason := "shared_token_certificate_valid"
	if status.Code(err) == codes.ResourceExhausted {
		reason = "shared_token_rate_limited"
	}
	s.m.authFailures.WithLabelValues(reason).Inc()
	if !s.tokenFailed(addr, cluster) {
		s.log.Warn("registration with the shared token refused", "cluster", cluster, "peer", addr, "reason", reason, "error", err)
	}
	return err
}

// sharedTokenDiagnostic reports the shared token's last registration of
// the cluster of record c, for describe cluster; nil when it never
// registered it.
func sharedTokenDiagnostic(c store.Cluster) *relayv1.Diagnostic {
	if c.SharedRegistered.IsZero() {
		return nil
	}
	return &relayv1.Diagnostic{
		Severity: string(meta.SeverityWarning),
		Summary:  "registered with the shared token",
		Detail: fmt.Sprintf("the shared token last registered this cluster at %s from %s; if its agent did not, "+
			"deregister the cluster and register it with its own token", c.SharedRegistered.UTC().Format(time.RFC3339), cmp.Or(c.SharedRegisteredFrom, "an unknown address")),
		Cluster: c.Name,
	}
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
		c.CertExpires = notAfter
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
