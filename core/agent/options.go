package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/spf13/pflag"
)

// Options configure an Agent.
type Options struct {
	// Cluster is the cluster's registered name.
	Cluster string
	// Server is the relay's address, host:port, or several separated by
	// commas: the agent moves to the next one each time a stream fails.
	Server string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
	// TokenFile holds the relay identity token from `meshrelay cluster register`.
	TokenFile string
	// CAFile is the CA bundle to trust the server with at registration.
	CAFile string
	// StateDir keeps the agent's key, certificate and CA bundle, and the
	// kinds the plugins declare (output kinds for pruning, input kinds for
	// discovery), across restarts.
	StateDir string
	// Mode is "mtls" (client certificates) or "tls" (the token on every stream).
	Mode string
	// Insecure dials in plaintext (development against a loopback server only).
	Insecure bool
	// Heartbeat is how often the agent sends a heartbeat on its stream; 0
	// (the default) sends none. The server needs none: it finds a dead
	// agent by its own heartbeats, whose writes go unacknowledged (gRPC
	// sets TCP_USER_TIMEOUT to the server's keepalive timeout), and by its
	// HTTP/2 keepalive (core/server/options.go), and counts a live stream
	// as the agent's sign of life. A proxy between the two that closes
	// streams on which the agent sends nothing may need it.
	Heartbeat time.Duration
	// ServerTimeout is how long the agent waits without hearing from the
	// server (its heartbeats included) before it drops the stream and
	// moves to the next server: a server that hangs, or a network that
	// drops packets without closing connections, ends no stream. The
	// agent announces it in its Hello, and the server heartbeats at a third
	// of it (never more often than the server's --heartbeat, see
	// core/server/heartbeat.go): a longer timeout costs both sides fewer
	// heartbeats, and the agent more time to leave a server that hangs. A
	// server that exits or crashes closes its connections, which the agent
	// sees at once whatever the timeout; a server whose node or network
	// is lost without closing them, at its Keepalive.
	ServerTimeout time.Duration
	// Keepalive is how long the agent's connection may stay without a
	// byte from the server before the agent pings it over HTTP/2; without
	// an answer in KeepaliveTimeout the connection is closed and the agent
	// moves to the next server. Above the interval the server heartbeats
	// at (a third of ServerTimeout, 30s by default), a live server never
	// leaves the connection quiet that long, so the agent does not ping
	// it. gRPC pings no more often than every 10s; the server accepts
	// pings every 5s.
	Keepalive        time.Duration
	KeepaliveTimeout time.Duration
	// ReconnectMax bounds the reconnect backoff.
	ReconnectMax time.Duration
	// MaxMessageBytes bounds gRPC messages; larger deltas are split.
	MaxMessageBytes int
	// Version is the agent's version, reported to the server.
	Version string
}

// DefaultOptions returns the agent's defaults.
func DefaultOptions() Options {
	return Options{
		Server:        "localhost:9900",
		StateDir:      "meshrelay-agent",
		Mode:          pki.ModeMTLS,
		ServerTimeout: 90 * time.Second,
		// Above the server's heartbeat every 30s (a third of the timeout):
		// a live server's connection is never quiet long enough to ping.
		Keepalive:        45 * time.Second,
		KeepaliveTimeout: 10 * time.Second,
		ReconnectMax:     30 * time.Second,
		MaxMessageBytes:  16 << 20,
		Version:          "dev",
	}
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Cluster, "cluster", o.Cluster, "this cluster's registered name")
	fs.StringVar(&o.Server, "server", o.Server, "relay address of the management server (several, comma separated, are tried in turn)")
	fs.StringVar(&o.ServerName, "server-name", o.ServerName, "name to verify in the server's certificate (default: the host of --server)")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "file holding the relay identity token")
	fs.StringVar(&o.CAFile, "ca-file", o.CAFile, "CA bundle to trust the server with")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "directory keeping the agent's key and certificate, and the kinds the plugins declare (to prune and discover them after a restart)")
	fs.StringVar(&o.Mode, "mode", o.Mode, "authentication: mtls (client certificate) or tls (token on every stream)")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "dial in plaintext (development only; --server must be a loopback address)")
	fs.DurationVar(&o.Heartbeat, "heartbeat", o.Heartbeat, "how often the agent sends a heartbeat (0: never); the server needs none, it finds a dead agent by its own heartbeats and keepalive")
	fs.DurationVar(&o.Keepalive, "keepalive", o.Keepalive, "ping the server over HTTP/2 after this long without a byte from it (above its heartbeat, a third of --server-timeout, a live server is never pinged), and move to the next server when no answer comes within --keepalive-timeout (at least 10s): a lost node or network is found in this time, not --server-timeout")
	fs.DurationVar(&o.KeepaliveTimeout, "keepalive-timeout", o.KeepaliveTimeout, "how long the agent waits for the answer to a keepalive ping")
	fs.DurationVar(&o.ServerTimeout, "server-timeout", o.ServerTimeout, "drop the stream and move to the next server after hearing nothing from it (heartbeats included) for this long; announced to the server, which heartbeats at a third of it (at most as often as its --heartbeat)")
}

// Validate reports whether the options can work.
func (o *Options) Validate() error {
	var errs []error
	if err := pki.ValidateClusterName(o.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("--cluster: %w", err))
	}
	if o.Server == "" {
		errs = append(errs, errors.New("--server is required"))
	}
	if o.Mode != pki.ModeMTLS && o.Mode != pki.ModeTLS {
		errs = append(errs, fmt.Errorf("--mode must be mtls or tls, not %q", o.Mode))
	}
	if o.Insecure && !pki.IsLoopbackAddr(o.Server) {
		errs = append(errs, fmt.Errorf("--insecure needs a loopback --server, not %q: the token and the cluster's state would cross the network in plain text", o.Server))
	}
	if !o.Insecure && o.CAFile == "" && o.StateDir == "" {
		errs = append(errs, errors.New("--ca-file is required to trust the server"))
	}
	if o.Heartbeat < 0 {
		errs = append(errs, errors.New("--heartbeat must not be negative"))
	}
	if o.ServerTimeout < 0 {
		errs = append(errs, errors.New("--server-timeout must not be negative"))
	}
	return errors.Join(errs...)
}
