package ui_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/ui"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// login logs in with the admin token and returns the session cookie's value.
func login(t *testing.T, e env) string {
	t.Helper()
	resp, body := request(t, http.DefaultClient, "POST", e.ui.URL()+"api/login", "", "application/json", `{"token": "`+e.token+`"}`)
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 {
		t.Fatalf("login = %d %s, cookies %v", resp.StatusCode, body, resp.Cookies())
	}
	return resp.Cookies()[0].Value
}

// withCookie asks GET /api/status with the session cookie value and returns
// the answer's status code.
func withCookie(t *testing.T, e env, value string) int {
	t.Helper()
	req, err := http.NewRequest("GET", e.ui.URL()+"api/status", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: "meshrelay_ui", Value: value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The login cookie names a session the UI keeps: it is not the admin token,
// so the admin API refuses it, and it is worth nothing once logged out,
// even replayed by someone who copied it; an open event stream of the
// session ends with it.
func TestSessionCookie(t *testing.T) {
	e := start(t, nil)
	cookie := login(t, e)
	if strings.Contains(cookie, e.token) || cookie == e.token {
		t.Fatalf("the session cookie %q holds the admin token", cookie)
	}
	if code := withCookie(t, e, cookie); code != http.StatusOK {
		t.Fatalf("GET /api/status with the session cookie = %d, want 200", code)
	}
	if resp, _ := request(t, http.DefaultClient, "GET", e.ui.URL()+"api/status", "Bearer "+cookie, "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the cookie's value as a bearer token = %d, want 401", resp.StatusCode)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+cookie))
	if _, err := e.srv.AdminServer().RegisterCluster(ctx, &relayv1.RegisterClusterRequest{Cluster: "east"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("RegisterCluster with the cookie's value as the admin token = %v, want Unauthenticated", err)
	}

	// An event stream opened with the session.
	req, err := http.NewRequest("GET", e.ui.URL()+"api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: "meshrelay_ui", Value: cookie})
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	r := bufio.NewReader(stream.Body)
	readEvent(t, r, "status")

	logout, err := http.NewRequest("POST", e.ui.URL()+"api/logout", nil)
	if err != nil {
		t.Fatal(err)
	}
	logout.AddCookie(&http.Cookie{Name: "meshrelay_ui", Value: cookie})
	resp, err := http.DefaultClient.Do(logout)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code := withCookie(t, e, cookie); code != http.StatusUnauthorized {
		t.Errorf("the session cookie replayed after logout = %d, want 401", code)
	}
	if msg := readEvent(t, r, "failed"); !strings.Contains(msg, "logged out") {
		t.Errorf("the event stream after logout says %q, want logged out", msg)
	}
}

// Sessions expire, and are bounded in number: a login beyond the bound
// ends the oldest session.
func TestSessionBounds(t *testing.T) {
	t.Run("expiry", func(t *testing.T) {
		e := start(t, func(o *ui.Options) { o.SessionLife = time.Second })
		cookie := login(t, e)
		testutil.Eventually(t, "the session to expire", func() bool { return withCookie(t, e, cookie) == http.StatusUnauthorized })
	})
	t.Run("count", func(t *testing.T) {
		e := start(t, func(o *ui.Options) { o.MaxSessions = 2 })
		first := login(t, e)
		second := login(t, e)
		third := login(t, e)
		for name, tc := range map[string]struct {
			cookie string
			want   int
		}{
			"first": {first, http.StatusUnauthorized}, "second": {second, http.StatusOK}, "third": {third, http.StatusOK},
		} {
			if code := withCookie(t, e, tc.cookie); code != tc.want {
				t.Errorf("the %s of three sessions over a bound of 2 = %d, want %d", name, code, tc.want)
			}
		}
	})
}
