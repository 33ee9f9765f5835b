package adminclient

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// admin answers GetStatus only to the token it expects.
type admin struct {
	relayv1.UnimplementedAdminServer
	token string
}

func (a admin) GetStatus(ctx context.Context, _ *relayv1.GetStatusRequest) (*relayv1.Status, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+a.token {
		return nil, status.Errorf(codes.Unauthenticated, "authorization %q", got)
	}
	return &relayv1.Status{}, nil
}

func serve(t *testing.T, token string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	relayv1.RegisterAdminServer(srv, admin{token: token})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func tokenFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDialSendsTheToken(t *testing.T) {
	addr := serve(t, "s3cret")
	c, err := Dial(Options{Addr: addr, TokenFile: tokenFile(t, "s3cret\n"), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.GetStatus(c.Context(context.Background()), &relayv1.GetStatusRequest{}); err != nil {
		t.Errorf("GetStatus() = %v, want the token accepted", err)
	}
	if _, err := c.GetStatus(context.Background(), &relayv1.GetStatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("GetStatus() without Context = %v, want Unauthenticated", err)
	}
}

func TestDialRefuses(t *testing.T) {
	tok := tokenFile(t, "s3cret")
	tests := map[string]struct {
		opts Options
		want string
	}{
		"plaintext off loopback":          {Options{Addr: "192.0.2.1:9900", TokenFile: tok, Insecure: true}, "loopback"},
		"no token file":                   {Options{Addr: "127.0.0.1:9900", TokenFile: filepath.Join(t.TempDir(), "none"), Insecure: true}, "read admin token"},
		"empty token":                     {Options{Addr: "127.0.0.1:9900", TokenFile: tokenFile(t, " \n"), Insecure: true}, "empty"},
		"no CA file":                      {Options{Addr: "127.0.0.1:9900", TokenFile: tok, CAFile: filepath.Join(t.TempDir(), "ca.crt")}, "read CA bundle"},
		"CA bundle without a certificate": {Options{Addr: "127.0.0.1:9900", TokenFile: tok, CABundle: []byte("not PEM")}, "holds no certificate"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Dial(tc.opts)
			if err == nil {
				c.Close()
				t.Fatalf("Dial() = nil error, want one saying %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Dial() = %v, want one saying %q", err, tc.want)
			}
		})
	}
}
