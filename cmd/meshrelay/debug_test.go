package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/internal/testutil"
)

// freeAddr returns a loopback address nothing listens on (now).
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// get returns the status and body of a GET of url, or an error.
func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// With --debug-addr the server serves its profiles there, on a listener
// of its own; without it nowhere, not even on its metrics address,
// although this binary imports net/http/pprof (which registers its
// handlers on http.DefaultServeMux).
func TestServerDebugAddr(t *testing.T) {
	for name, on := range map[string]bool{"on": true, "off": false} {
		t.Run(name, func(t *testing.T) {
			metrics, debug := freeAddr(t), freeAddr(t)
			args := []string{"server", "--listen", "127.0.0.1:0", "--metrics-addr", metrics, "--data-dir", t.TempDir(), "--log-level", "error"}
			if on {
				args = append(args, "--debug-addr", debug)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				root := newRootCommand()
				root.SetOut(io.Discard)
				root.SetErr(io.Discard)
				root.SetArgs(args)
				done <- root.ExecuteContext(ctx)
			}()
			exited := false
			t.Cleanup(func() {
				cancel()
				if !exited {
					if err := <-done; err != nil {
						t.Errorf("server: %v", err)
					}
				}
			})
			testutil.Eventually(t, "the server's /healthz answers", func() bool {
				select {
				case err := <-done:
					exited = true
					t.Fatalf("server exited: %v", err)
				default:
				}
				code, _, err := get("http://" + metrics + "/healthz")
				return err == nil && code == http.StatusOK
			})
			if code, _, err := get("http://" + metrics + "/debug/pprof/"); err != nil || code != http.StatusNotFound {
				t.Errorf("GET /debug/pprof/ on the metrics address = %d, %v; want 404", code, err)
			}
			code, body, err := get("http://" + debug + "/debug/pprof/")
			if !on {
				if err == nil {
					t.Fatalf("GET /debug/pprof/ without --debug-addr = %d, want no listener", code)
				}
				return
			}
			if err != nil || code != http.StatusOK || !strings.Contains(body, "goroutine") {
				t.Fatalf("GET /debug/pprof/ on --debug-addr = %d, %v, %.200q; want the profiles' index", code, err, body)
			}
			code, body, err = get("http://" + debug + "/debug/pprof/goroutine?debug=1")
			if err != nil || code != http.StatusOK || !strings.Contains(body, "runServer") {
				t.Errorf("GET /debug/pprof/goroutine = %d, %v, %.300q; want the server's goroutines", code, err, body)
			}
			if code, _, err := get("http://" + debug + "/metrics"); err != nil || code != http.StatusNotFound {
				t.Errorf("GET /metrics on --debug-addr = %d, %v; want 404: profiles only", code, err)
			}
		})
	}
}

// A port alone listens on loopback; both commands take the flag, off by
// default.
func TestDebugListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		":6060":          "127.0.0.1:6060",
		"127.0.0.1:0":    "127.0.0.1:0",
		"[::1]:6060":     "[::1]:6060",
		"0.0.0.0:6060":   "0.0.0.0:6060",
		"localhost:6060": "localhost:6060",
	} {
		if got, err := debugListenAddr(in); err != nil || got != want {
			t.Errorf("debugListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := debugListenAddr("6060"); err == nil {
		t.Error(`debugListenAddr("6060") = nil error, want one`)
	}
	for _, cmd := range []string{"server", "agent"} {
		c, _, err := newRootCommand().Find([]string{cmd})
		if err != nil {
			t.Fatal(err)
		}
		f := c.Flags().Lookup("debug-addr")
		if f == nil || f.DefValue != "" {
			t.Errorf("meshrelay %s --debug-addr = %v, want a flag, empty by default", cmd, f)
		}
	}
}
