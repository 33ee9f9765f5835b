package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/pflag"
)

// debugFlagUsage is the --help text of --debug-addr, for the server and
// the agent.
const debugFlagUsage = "serve the Go runtime's profiles (net/http/pprof: CPU, heap, goroutines, mutexes, traces) under /debug/pprof/ on this address, a listener of its own (empty: off); a port alone (:6060) listens on loopback only. Anyone who reaches it can read the process's stacks and make it profile itself: keep it on loopback (kubectl port-forward reaches it)"

// addDebugFlag adds --debug-addr to fs.
func addDebugFlag(fs *pflag.FlagSet, addr *string) {
	fs.StringVar(addr, "debug-addr", "", debugFlagUsage)
}

// debugListenAddr is the address --debug-addr listens on: a port without
// a host is on loopback, not on every interface.
func debugListenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", &exitError{code: 2, err: fmt.Errorf("--debug-addr: %w", err)}
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// debugHandler serves net/http/pprof's handlers under /debug/pprof/, and
// nothing else. It is its own mux: importing net/http/pprof also adds them
// to http.DefaultServeMux, which no listener of meshrelay serves.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveDebug serves debugHandler on addr (debugListenAddr) until stop is
// called; an empty addr serves nothing.
func serveDebug(addr string, logger *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	listen, err := debugListenAddr(addr)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen --debug-addr: %w", err)
	}
	// No write timeout: a CPU profile or a trace answers after its
	// ?seconds=.
	srv := &http.Server{Handler: debugHandler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("serve --debug-addr", "error", err)
		}
	}()
	logger.Info("serving profiles", "addr", "http://"+lis.Addr().String()+"/debug/pprof/")
	return func() {
		srv.Close()
		<-done
	}, nil
}
