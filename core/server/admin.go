package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

type admin struct {
	relayv1.UnimplementedAdminServer
	s *Server
}

// authorize checks the admin token in the call's metadata.
func (a *admin) authorize(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		tok, ok := strings.CutPrefix(v, "Bearer ")
		if ok && pki.TokenMatches(a.s.adminHash, tok) {
			return nil
		}
	}
	a.s.m.authFailures.WithLabelValues("admin_token").Inc()
	return status.Error(codes.Unauthenticated, "a valid admin token is required (authorization: Bearer TOKEN)")
}

// Authorize checks the admin token ctx carries, as every admin call does,
// and does nothing else: the web UI checks a caller with it before
// serving what it computed for another.
func (a *admin) Authorize(ctx context.Context) error { return a.authorize(ctx) }

// RegisterCluster creates a relay identity token for a cluster.
func (a *admin) RegisterCluster(ctx context.Context, req *relayv1.RegisterClusterRequest) (*relayv1.RegisterClusterResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	s := a.s
	if err := pki.ValidateClusterName(req.GetCluster()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register cluster: %v", err)
	}
	tok, err := pki.NewToken()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "create token: %v", err)
	}
	if _, err := changeLabels(nil, req.GetLabels(), nil); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register cluster %q: %v", req.GetCluster(), err)
	}
	ttl := s.opts.TokenTTL
	if sec := req.GetTokenTtlSeconds(); sec > 0 {
		ttl = time.Duration(sec) * time.Second
	}
	var invalid error
	c, err := store.UpdateCluster(ctx, s.deps.Store, req.GetCluster(), func(c *store.Cluster, found bool) error {
		if !found || c.Revoked {
			*c = store.Cluster{Name: c.Name, Registered: time.Now(), Version: c.Version}
		}
		c.TokenHash = pki.HashToken(tok)
		c.TokenExpires = time.Now().Add(ttl)
		c.TokenReusable = req.GetReusable()
		c.SharedToken = req.GetAllowSharedToken()
		c.Labels, invalid = changeLabels(c.Labels, req.GetLabels(), nil)
		return invalid
	})
	if invalid != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register cluster %q: %v", req.GetCluster(), invalid)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "store cluster: %v", err)
	}
	s.log.Info("cluster token issued", "cluster", c.Name, "expires", c.TokenExpires, "reusable", c.TokenReusable, "shared_token", c.SharedToken, "labels", c.Labels)
	s.setLabels(c.Name, c.Labels)
	return &relayv1.RegisterClusterResponse{Token: tok, Expires: timestamppb.New(c.TokenExpires)}, nil
}

// DeregisterCluster revokes a cluster.
func (a *admin) DeregisterCluster(ctx context.Context, req *relayv1.DeregisterClusterRequest) (*relayv1.DeregisterClusterResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	if err := a.s.Deregister(ctx, req.GetCluster()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "cluster %q is not registered", req.GetCluster())
		}
		return nil, status.Errorf(codes.Unavailable, "deregister: %v", err)
	}
	return &relayv1.DeregisterClusterResponse{}, nil
}

// ListClusters returns the registry with connection state.
func (a *admin) ListClusters(ctx context.Context, _ *relayv1.ListClustersRequest) (*relayv1.ListClustersResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	cs, err := a.s.clusterStatuses(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "list clusters: %v", err)
	}
	return &relayv1.ListClustersResponse{Clusters: cs}, nil
}

// GetStatus returns the fleet's status.
func (a *admin) GetStatus(ctx context.Context, _ *relayv1.GetStatusRequest) (*relayv1.Status, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	return a.s.Status(ctx)
}

// List returns the objects of one kind across the fleet.
func (a *admin) List(ctx context.Context, req *relayv1.ListRequest) (*relayv1.ListResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	return a.s.List(ctx, req)
}

// DescribeDestination describes one Service across the fleet.
func (a *admin) DescribeDestination(ctx context.Context, req *relayv1.DescribeRequest) (*relayv1.DestinationDescription, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	return a.s.DescribeDestination(ctx, req)
}

// DescribePolicy describes one policy across the fleet.
func (a *admin) DescribePolicy(ctx context.Context, req *relayv1.DescribeRequest) (*relayv1.PolicyDescription, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	return a.s.DescribePolicy(ctx, req)
}

// DescribeCluster describes one registered cluster.
func (a *admin) DescribeCluster(ctx context.Context, req *relayv1.DescribeRequest) (*relayv1.ClusterDescription, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	return a.s.DescribeCluster(ctx, req)
}

// Deregister revokes a cluster: its token and certificates are refused from
// now on, its stream is closed with a goodbye, and its inputs and outputs
// leave the fleet view and the store.
func (s *Server) Deregister(ctx context.Context, cluster string) error {
	_, err := store.UpdateCluster(ctx, s.deps.Store, cluster, func(c *store.Cluster, found bool) error {
		if !found {
			return fmt.Errorf("cluster %q: %w", cluster, store.ErrNotFound)
		}
		c.Revoked, c.RevokedAt = true, time.Now()
		c.TokenHash, c.Serials, c.SharedToken = nil, nil, false
		return nil
	})
	if err != nil {
		return err
	}
	s.forgetCluster(ctx, cluster)
	if err := s.deps.Store.DeleteInput(ctx, cluster); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("delete input of deregistered cluster", "cluster", cluster, "error", err)
	}
	if err := s.deps.Store.DeleteOutputs(ctx, cluster); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("delete outputs of deregistered cluster", "cluster", cluster, "error", err)
	}
	s.log.Info("cluster deregistered", "cluster", cluster)
	return nil
}

// forgetCluster drops a revoked cluster from this replica: its stream, its
// inputs in the view, safe mode's wait for it, and its trust report.
func (s *Server) forgetCluster(ctx context.Context, cluster string) {
	s.mu.Lock()
	st := s.streams[cluster]
	ended := s.safe.forget(cluster)
	s.mu.Unlock()
	if st != nil {
		st.goodbye(relayv1.Goodbye_REASON_DEREGISTERED, "cluster deregistered")
	}
	s.leave(cluster)
	s.trust.Forget(ctx, cluster)
	if ended {
		s.safeModeEnded()
	}
}

// httpHandler serves /metrics, /healthz and /readyz.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		// Degraded is still ready: the server serves from memory. Store
		// errors and cluster names only go to callers with the admin token.
		detail := s.adminRequest(r)
		state, err := s.storeHealth()
		msg := "ok"
		if state != "ok" {
			msg = "degraded"
			if detail {
				msg += ": store: " + errString(err)
			}
		}
		s.mu.Lock()
		if s.safe.on {
			msg += "; safe mode"
			if detail {
				msg += fmt.Sprintf(": waiting for %d clusters: %s", len(s.safe.waiting), strings.Join(s.safe.waitingFirst(), ","))
				if more := len(s.safe.waiting) - waitingShown; more > 0 {
					msg += fmt.Sprintf(" and %d more", more)
				}
			}
		}
		s.mu.Unlock()
		w.Write([]byte(msg + "\n"))
	})
	return mux
}

// adminRequest reports whether an HTTP request carries the admin token.
func (s *Server) adminRequest(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && pki.TokenMatches(s.adminHash, tok)
}

func errString(err error) string {
	if err == nil {
		return "unknown"
	}
	return err.Error()
}

// storeHealth returns "ok" or "degraded" with the reason.
func (s *Server) storeHealth() (string, error) {
	if h, ok := s.deps.Store.(healthReporter); ok {
		return h.Health()
	}
	return "ok", nil
}
