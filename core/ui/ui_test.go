package ui_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/ui"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/metadata"
)

// env is a real server on the memory store with its UI.
type env struct {
	srv   *server.Server
	ui    *ui.Server
	token string
}

// start runs a server on a new memory store and its UI until the test
// ends; change adjusts the UI's options.
func start(t *testing.T, change func(*ui.Options)) env {
	t.Helper()
	return startOn(t, memory.New(), server.DefaultOptions(), change)
}

// startOn runs a server with opts on st, and its UI.
func startOn(t *testing.T, st store.Store, opts server.Options, change func(*ui.Options)) env {
	t.Helper()
	return startWith(t, server.Deps{Store: st}, opts, change)
}

// startWith runs a server with opts and deps, and its UI.
func startWith(t *testing.T, deps server.Deps, opts server.Options, change func(*ui.Options)) env {
	t.Helper()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, opts, deps)
	if err != nil {
		t.Fatal(err)
	}
	uopts := ui.DefaultOptions()
	uopts.Addr, uopts.Poll = "127.0.0.1:0", 20*time.Millisecond
	if change != nil {
		change(&uopts)
	}
	if uopts.TLS != nil {
		uopts.TLS = srv.ServingTLSConfig()
	}
	web, err := ui.New(uopts, srv.AdminServer(), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- srv.Run(ctx) }()
	go func() { done <- web.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})
	tok, err := os.ReadFile(srv.AdminTokenPath())
	if err != nil {
		t.Fatal(err)
	}
	return env{srv: srv, ui: web, token: strings.TrimSpace(string(tok))}
}

func request(t *testing.T, c *http.Client, method, url, auth, contentType, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, string(data)
}

// Every API answer needs the admin token, from the bearer header or the
// login cookie; the login checks the token, sets an HttpOnly, SameSite
// cookie only for a valid one, and refuses other content types and large
// bodies; logout ends the session.
func TestAuthentication(t *testing.T) {
	e := start(t, nil)
	base := e.ui.URL()
	c := &http.Client{}
	for _, path := range []string{"api/status", "api/graph", "api/list/clusters", "api/clusters/east", "api/clusters/east/outputs/istio", "api/destinations/ns/svc", "api/policies/AccessPolicy/ns/p", "api/events"} {
		for _, auth := range []string{"", "Bearer wrong", "Basic " + e.token, e.token} {
			if resp, body := request(t, c, "GET", base+path, auth, "", ""); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET /%s with %q = %d %s, want 401", path, auth, resp.StatusCode, body)
			}
		}
	}
	if resp, body := request(t, c, "GET", base+"api/status", "Bearer "+e.token, "", ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"serverId"`) {
		t.Errorf("GET /api/status with the token = %d %s", resp.StatusCode, body)
	}
	if resp, _ := request(t, c, "GET", base+"api/nothing", "Bearer "+e.token, "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /api/nothing = %d, want 404", resp.StatusCode)
	}
	if resp, _ := request(t, c, "GET", base+"api/clusters/nowhere", "Bearer "+e.token, "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /api/clusters/nowhere = %d, want 404", resp.StatusCode)
	}

	for name, tc := range map[string]struct {
		contentType, body string
		want              int
	}{
		"wrong token":  {"application/json", `{"token": "wrong"}`, http.StatusUnauthorized},
		"form":         {"application/x-www-form-urlencoded", "token=" + e.token, http.StatusUnsupportedMediaType},
		"not JSON":     {"application/json", "token", http.StatusBadRequest},
		"large body":   {"application/json", `{"token": "` + strings.Repeat("x", 8<<10) + `"}`, http.StatusBadRequest},
		"valid token":  {"application/json", `{"token": "` + e.token + `"}`, http.StatusNoContent},
		"padded token": {"application/json", `{"token": " ` + e.token + "\\n" + `"}`, http.StatusNoContent},
	} {
		resp, body := request(t, c, "POST", base+"api/login", "", tc.contentType, tc.body)
		if resp.StatusCode != tc.want {
			t.Errorf("login %s = %d %s, want %d", name, resp.StatusCode, body, tc.want)
		}
		cookies := resp.Cookies()
		if tc.want != http.StatusNoContent {
			if len(cookies) > 0 {
				t.Errorf("login %s set cookies %v", name, cookies)
			}
			continue
		}
		if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].MaxAge <= 0 {
			t.Errorf("login %s set cookies %v, want one HttpOnly SameSite=Strict session cookie", name, cookies)
		}
	}

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c = &http.Client{Jar: jar}
	request(t, c, "POST", base+"api/login", "", "application/json", `{"token": "`+e.token+`"}`)
	if resp, body := request(t, c, "GET", base+"api/status", "", "", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/status with the login cookie = %d %s", resp.StatusCode, body)
	}
	if resp, _ := request(t, c, "GET", base+"api/status", "Bearer wrong", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong bearer header with a valid cookie = %d, want 401 (the header wins)", resp.StatusCode)
	}
	request(t, c, "POST", base+"api/logout", "", "", "")
	if resp, _ := request(t, c, "GET", base+"api/status", "", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /api/status after logout = %d, want 401", resp.StatusCode)
	}

	resp, body := request(t, c, "GET", base, "", "", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<main id="app">`) {
		t.Errorf("GET / = %d %s, want the embedded front end", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("GET / has Content-Security-Policy %q", csp)
	}
}

// readEvent reads the next server-sent event named name and returns its data.
func readEvent(t *testing.T, r *bufio.Reader, name string) string {
	t.Helper()
	event := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read event stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == name:
			return strings.TrimPrefix(line, "data: ")
		}
	}
}

// The event stream sends the status at once and again when it changes,
// and is bounded: over MaxStreams a stream is refused.
func TestEvents(t *testing.T) {
	e := start(t, func(o *ui.Options) { o.MaxStreams = 1 })
	req, err := http.NewRequest("GET", e.ui.URL()+"api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET /api/events = %d %s", resp.StatusCode, ct)
	}
	r := bufio.NewReader(resp.Body)
	if first := readEvent(t, r, "status"); strings.Contains(first, "east") {
		t.Fatalf("the first status names east before it is registered: %s", first)
	}

	if over, body := request(t, http.DefaultClient, "GET", e.ui.URL()+"api/events", "Bearer "+e.token, "", ""); over.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a second stream over MaxStreams 1 = %d %s, want 503", over.StatusCode, body)
	}

	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+e.token))
	if _, err := e.srv.AdminServer().RegisterCluster(ctx, &relayv1.RegisterClusterRequest{Cluster: "east"}); err != nil {
		t.Fatal(err)
	}
	if next := readEvent(t, r, "status"); !strings.Contains(next, `"name":"east"`) && !strings.Contains(next, `"name": "east"`) {
		t.Errorf("the status after registering east does not name it: %s", next)
	}
}

// The UI serves plain HTTP only on loopback; elsewhere HTTPS with the
// server's certificate, which the CA bundle verifies.
func TestTLS(t *testing.T) {
	opts := ui.DefaultOptions()
	opts.Addr = "0.0.0.0:0"
	if err := opts.Validate(); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("plain HTTP on 0.0.0.0 validated: %v", err)
	}
	opts.TLS = &tls.Config{}
	if err := opts.Validate(); err != nil {
		t.Errorf("HTTPS on 0.0.0.0: %v", err)
	}

	e := start(t, func(o *ui.Options) { o.TLS = &tls.Config{} })
	if !strings.HasPrefix(e.ui.URL(), "https://") {
		t.Fatalf("URL %s is not https", e.ui.URL())
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.srv.CABundle())
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if resp, body := request(t, c, "GET", e.ui.URL()+"api/status", "Bearer "+e.token, "", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/status over HTTPS = %d %s", resp.StatusCode, body)
	}
	resp, body := request(t, c, "POST", e.ui.URL()+"api/login", "", "application/json", `{"token": "`+e.token+`"}`)
	if cookies := resp.Cookies(); resp.StatusCode != http.StatusNoContent || len(cookies) != 1 || !cookies[0].Secure {
		t.Errorf("login over HTTPS = %d %s, cookies %v, want one Secure cookie", resp.StatusCode, body, cookies)
	}
}
