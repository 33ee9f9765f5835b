package adminclient

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/meshrelay/meshrelay/core/pki"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// Options say how to reach a server's admin API.
type Options struct {
	// Addr is the server's relay address, host:port.
	Addr string
	// CABundle is the PEM of the CA the server's certificate must chain
	// to, or CAFile the file holding it; not used when Insecure.
	CABundle []byte
	CAFile   string
	// ServerName is the name to verify in the server's certificate; the
	// host of Addr when empty.
	ServerName string
	// TokenFile holds the admin token (surrounding space is trimmed).
	TokenFile string
	// Insecure dials in plaintext, only to a loopback Addr.
	Insecure bool
	// MaxResponse is the largest answer read, in bytes; gRPC's default
	// (4 MiB) when zero.
	MaxResponse int
}

// Client is a connection to the admin API. Calls need a context from
// [Client.Context], which carries the token.
type Client struct {
	relayv1.AdminClient
	conn  *grpc.ClientConn
	token string
}

// Dial reads the token and connects; gRPC connects lazily, so an
// unreachable server shows on the first call.
func Dial(opts Options) (*Client, error) {
	tok, err := os.ReadFile(opts.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("read admin token: %w", err)
	}
	token := strings.TrimSpace(string(tok))
	if token == "" {
		return nil, fmt.Errorf("admin token file %s is empty", opts.TokenFile)
	}
	creds, err := transport(opts)
	if err != nil {
		return nil, err
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if opts.MaxResponse > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.MaxResponse)))
	}
	conn, err := grpc.NewClient(opts.Addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", opts.Addr, err)
	}
	return &Client{AdminClient: relayv1.NewAdminClient(conn), conn: conn, token: token}, nil
}

// transport returns the connection's credentials.
func transport(opts Options) (credentials.TransportCredentials, error) {
	if opts.Insecure {
		if !pki.IsLoopbackAddr(opts.Addr) {
			return nil, fmt.Errorf("--insecure needs a loopback --server, not %q: the admin token would cross the network in plain text", opts.Addr)
		}
		return insecure.NewCredentials(), nil
	}
	ca, what := opts.CABundle, "the CA bundle"
	if ca == nil {
		data, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA bundle: %w", err)
		}
		ca, what = data, "CA bundle "+opts.CAFile
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", what)
	}
	name := opts.ServerName
	if name == "" {
		name, _, _ = net.SplitHostPort(opts.Addr)
	}
	return credentials.NewTLS(pki.ClientTLSConfig(pki.ClientTLSOptions{RootCAs: pool, ServerName: name})), nil
}

// Context returns ctx carrying the admin token.
func (c *Client) Context(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Traffic returns a client of the Traffic API on the same connection.
func (c *Client) Traffic() relayv1.TrafficClient { return relayv1.NewTrafficClient(c.conn) }
