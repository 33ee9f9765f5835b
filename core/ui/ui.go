package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// dist is the front end's build output (web/ built by `make ui`).
//
//go:embed all:dist
var dist embed.FS

// Server serves the web UI on its own listener.
type Server struct {
	opts     Options
	admin    relayv1.AdminServer
	log      *slog.Logger
	lis      net.Listener
	streams  chan struct{}
	status   statusCache
	shared   sharedCache
	sessions *sessions
}

// New checks the options and opens the UI's listener; Run serves it. admin
// is the admin API the UI reads, usually server.Server.AdminServer.
func New(opts Options, admin relayv1.AdminServer, logger *slog.Logger) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Addr == "" {
		return nil, errors.New("ui: no address")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	lis, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen ui: %w", err)
	}
	return &Server{
		opts: opts, admin: admin, log: logger.With("component", "ui"), lis: lis,
		streams:  make(chan struct{}, opts.MaxStreams),
		sessions: newSessions(opts.SessionLife, opts.MaxSessions),
	}, nil
}

// URL returns the UI's address as a URL, with the bound port.
func (s *Server) URL() string {
	scheme := "http"
	if s.opts.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + s.lis.Addr().String() + "/"
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         s.opts.TLS,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.log.Info("web UI serving", "url", s.URL())
	var err error
	if s.opts.TLS != nil {
		err = srv.ServeTLS(s.lis, "", "")
	} else {
		err = srv.Serve(s.lis)
	}
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return fmt.Errorf("serve ui: %w", err)
}

// Handler returns the UI's HTTP handler: the API under /api/ and the
// embedded front end everywhere else.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/login", s.login)
	mux.HandleFunc("POST /api/logout", s.logout)
	mux.HandleFunc("GET /api/events", s.events)
	mux.HandleFunc("GET /api/status", s.get(func(ctx context.Context, _ *http.Request) (any, error) {
		// The event streams' status: a page opened asks for it, then
		// opens its stream.
		if err := s.authorize(ctx); err != nil {
			return nil, err
		}
		_, data, err := s.status.get(ctx, s.admin, s.opts.Poll/2, "")
		return json.RawMessage(data), err
	}))
	mux.HandleFunc("GET /api/graph", s.get(func(ctx context.Context, _ *http.Request) (any, error) {
		return s.cachedGraph(ctx)
	}))
	mux.HandleFunc("GET /api/list/{kind}", s.get(func(ctx context.Context, r *http.Request) (any, error) {
		q := r.URL.Query()
		return s.admin.List(ctx, &relayv1.ListRequest{
			Kind: r.PathValue("kind"), Cluster: q.Get("cluster"), Namespace: q.Get("namespace"),
			LabelSelector: q.Get("selector"), Backend: q.Get("backend"),
		})
	}))
	mux.HandleFunc("GET /api/destinations/{namespace}/{name}", s.get(func(ctx context.Context, r *http.Request) (any, error) {
		return s.admin.DescribeDestination(ctx, &relayv1.DescribeRequest{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")})
	}))
	mux.HandleFunc("GET /api/policies/{kind}/{namespace}/{name}", s.get(s.describePolicy))
	mux.HandleFunc("GET /api/clusters/{name}", s.get(func(ctx context.Context, r *http.Request) (any, error) {
		return s.admin.DescribeCluster(ctx, &relayv1.DescribeRequest{Name: r.PathValue("name")})
	}))
	mux.HandleFunc("GET /api/clusters/{name}/outputs/{backend}", s.get(func(ctx context.Context, r *http.Request) (any, error) {
		return s.outputsYAML(ctx, r.PathValue("name"), r.PathValue("backend"))
	}))
	mux.HandleFunc("GET /api/rollout", s.get(s.rollout))
	s.trafficRoutes(mux)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API: "+r.Method+" "+r.URL.Path)
	})
	static, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded at build time
	}
	mux.Handle("/", http.FileServerFS(static))
	return secureHeaders(mux)
}

// secureHeaders keeps the UI's pages from being framed, sniffed or made to
// load anything from elsewhere.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if r.URL.Path == "/" || r.URL.Path == "/index.html" {
			h.Set("Cache-Control", "no-cache")
		}
		next.ServeHTTP(w, r)
	})
}
