package server

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Streams waiting for their Hello are bounded per cluster when the
// stream is authenticated before it (a client certificate, or a token in
// its headers): maxClusterHellos. The others (a token only in the Hello,
// as older agents send it in --mode tls) are bounded per client address,
// maxPeerHellos, and all together, maxPendingHellos; they are read with
// the small receive limit of unauthenticated connections. maxLimiters
// bounds the failure limiters kept.
const (
	maxClusterHellos = 2
	maxPeerHellos    = 4
	maxPendingHellos = 64
	maxLimiters      = 100000
)

// errNotRegistered abandons a registry update of a cluster that is not (or
// no longer) registered.
var errNotRegistered = errors.New("cluster is not registered")

// identity is the verified client certificate of a call's connection.
type identity struct {
	cluster, serial string
	notAfter        time.Time
}

// peerIdentity returns the caller's verified client certificate; ok is
// false when the caller presented none.
func peerIdentity(ctx context.Context) (id identity, ok bool, err error) {
	p, found := peer.FromContext(ctx)
	if !found {
		return id, false, nil
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.PeerCertificates) == 0 {
		return id, false, nil
	}
	cluster, serial, err := pki.ClusterFromConnectionState(info.State)
	if err != nil {
		return id, true, err
	}
	return identity{cluster: cluster, serial: serial, notAfter: info.State.PeerCertificates[0].NotAfter}, true, nil
}

// checkIdentity refuses a certificate that expired, whose serial the
// cluster's record no longer holds (evicted by renewals, or cleared by a
// deregistration), or whose cluster was deregistered. It runs on every
// call, not only at the handshake, since a connection outlives all three.
func (s *Server) checkIdentity(ctx context.Context, id identity) (store.Cluster, error) {
	if !time.Now().Before(id.notAfter) {
		s.m.authFailures.WithLabelValues("expired_certificate").Inc()
		return store.Cluster{}, status.Errorf(codes.Unauthenticated, "the certificate of cluster %q expired at %s", id.cluster, id.notAfter.Format(time.RFC3339))
	}
	c, err := s.deps.Store.GetCluster(ctx, id.cluster)
	return c, s.checkRecord(id, c, err)
}

// checkRecord is checkIdentity on the cluster's record as read (c, err),
// the certificate's expiry aside.
func (s *Server) checkRecord(id identity, c store.Cluster, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && c.Revoked):
		s.m.authFailures.WithLabelValues("revoked").Inc()
		return status.Errorf(codes.PermissionDenied, "cluster %q is not registered", id.cluster)
	case err != nil:
		return status.Errorf(codes.Unavailable, "look up cluster: %v", err)
	case !slices.Contains(c.Serials, id.serial):
		s.m.authFailures.WithLabelValues("revoked_certificate").Inc()
		return status.Errorf(codes.PermissionDenied, "certificate %s of cluster %q was revoked", id.serial, id.cluster)
	}
	return nil
}

// callIdentity checks the caller's certificate, if it presented one.
func (s *Server) callIdentity(ctx context.Context) error {
	id, ok, err := peerIdentity(ctx)
	if !ok {
		return nil
	}
	if err != nil {
		s.m.authFailures.WithLabelValues("no_certificate").Inc()
		return status.Errorf(codes.Unauthenticated, "client certificate: %v", err)
	}
	_, err = s.checkIdentity(ctx, id)
	return err
}

// unaryIdentity checks the caller's certificate before every unary call.
func (s *Server) unaryIdentity(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.callIdentity(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// streamIdentity checks the caller's certificate before every stream.
func (s *Server) streamIdentity(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.callIdentity(ss.Context()); err != nil {
		return err
	}
	return handler(srv, ss)
}

// Failed token checks are limited per client address and per cluster name:
// each key gets RegisterFailures failures per minute. Only failures count,
// and a correct token is accepted whatever the limiters say, so nobody's
// failures lock a legitimate agent out.

func addrKey(addr string) string       { return "addr:" + addr }
func clusterKey(cluster string) string { return "cluster:" + cluster }

// tokenFailed records a failed token check from addr for cluster and
// reports whether either key is over its limit.
func (s *Server) tokenFailed(addr, cluster string) (limited bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range []string{addrKey(addr), clusterKey(cluster)} {
		lim, ok := s.limiters[key]
		if !ok {
			if len(s.limiters) >= maxLimiters {
				return true
			}
			n := max(s.opts.RegisterFailures, 1)
			lim = rate.NewLimiter(rate.Every(time.Minute/time.Duration(n)), n)
			s.limiters[key] = lim
		}
		if !lim.Allow() {
			limited = true
		}
	}
	return limited
}

// refuseToken turns a failed token check into the caller's answer:
// ResourceExhausted once the address or the cluster is over its limit.
func (s *Server) refuseToken(addr, cluster string, err error) error {
	if status.Code(err) != codes.Unauthenticated {
		return err
	}
	if s.tokenFailed(addr, cluster) {
		s.m.authFailures.WithLabelValues("rate_limited").Inc()
		return status.Error(codes.ResourceExhausted, "too many failed attempts from this address or for this cluster; try again later")
	}
	return err
}

// pruneLimiters drops the limiters that are full again: they hold no
// failure worth remembering.
func (s *Server) pruneLimiters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, lim := range s.limiters {
		if lim.Tokens() >= float64(lim.Burst()) {
			delete(s.limiters, key)
		}
	}
}

// helloSlot takes one of the slots of streams waiting for their Hello:
// one of cluster's, or when the stream is not yet authenticated (cluster
// is empty), one of its address's and one of the server's.
func (s *Server) helloSlot(ctx context.Context, cluster string) (release func(), err error) {
	key, limit, reason := clusterKey(cluster), maxClusterHellos, "cluster_pending_hellos"
	if cluster == "" {
		key, limit, reason = addrKey(peerHost(ctx)), maxPeerHellos, "peer_pending_hellos"
		select {
		case s.unauthHellos <- struct{}{}:
		default:
			s.m.connRefusals.WithLabelValues("pending_hellos").Inc()
			return nil, status.Error(codes.ResourceExhausted, "too many streams are waiting for their Hello; try again later")
		}
	}
	s.mu.Lock()
	if s.hellos[key] >= limit {
		s.mu.Unlock()
		if cluster == "" {
			<-s.unauthHellos
		}
		s.m.connRefusals.WithLabelValues(reason).Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "%d streams of this cluster or address are already waiting for their Hello; try again later", limit)
	}
	s.hellos[key]++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.hellos[key]--; s.hellos[key] <= 0 {
			delete(s.hellos, key)
		}
		s.mu.Unlock()
		if cluster == "" {
			<-s.unauthHellos
		}
	}, nil
}

// verifyConn tells the gate that the caller's connection carries
// cluster's verified token (--mode tls), so that it is held to the
// cluster's budgets and gets an agent's limits.
func (s *Server) verifyConn(ctx context.Context, cluster string) error {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil || s.gate == nil {
		return nil
	}
	if err := s.gate.verify(p.Addr.String(), cluster); err != nil {
		return status.Errorf(codes.ResourceExhausted, "%v", err)
	}
	return nil
}

// waitHello receives a stream's first message within the Hello timeout.
func waitHello(ctx context.Context, timeout time.Duration, recv func() (*relayv1.AgentMessage, error)) (*relayv1.AgentMessage, error) {
	type result struct {
		msg *relayv1.AgentMessage
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := recv()
		ch <- result{m, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.msg, r.err
	case <-t.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "no Hello within %s", timeout)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}
