package server

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Modes of agent authentication.
const (
	// ModeMTLS: agents register with a token once, then use client certificates.
	ModeMTLS = "mtls"
	// ModeTLS: server-authenticated TLS, and the token on every stream.
	ModeTLS = "tls"
)

// Options configure a Server.
type Options struct {
	// ListenAddr is the relay's gRPC address.
	ListenAddr string
	// AdminAddr serves /metrics, /healthz and /readyz over HTTP.
	AdminAddr string
	// ServerID names this replica; default: the host name and a random suffix.
	ServerID string
	// DataDir holds the generated CA and admin token when they are not in the store.
	DataDir string
	// CACertFile, CAKeyFile and CAChainFile load a CA (possibly an
	// intermediate under a user's PKI) instead of generating one.
	CACertFile, CAKeyFile, CAChainFile string
	// ServerSANs are the DNS names and IPs in the server certificate.
	ServerSANs []string
	// CertTTL is the life of agent client certificates.
	CertTTL time.Duration
	// Mode is ModeMTLS or ModeTLS.
	Mode string
	// InsecureLoopback serves plaintext gRPC; only allowed on a loopback address.
	InsecureLoopback bool
	// SharedToken, when set, is an install-wide relay identity token any
	// registered cluster may use. Off by default.
	SharedToken string
	// AdminTokenFile holds the admin API token; generated in DataDir when empty.
	AdminTokenFile string
	// SafeStartWindow bounds safe mode; 0 waits for every cluster.
	SafeStartWindow time.Duration
	// Debounce is the engine's coalescing window.
	Debounce time.Duration
	// Heartbeat is how often streams exchange heartbeats.
	Heartbeat time.Duration
	// RegisterFailures is how many failed registrations a client address may
	// make per minute before it is refused with ResourceExhausted.
	RegisterFailures int
	// MaxMessageBytes bounds gRPC messages; larger deltas are split.
	MaxMessageBytes int
	// Targets says whose outputs the replica computes: TargetsConnected,
	// the clusters whose agents are connected to it (replicas divide the
	// work), or TargetsAll, every cluster of the fleet.
	Targets string
}

// Whose outputs a replica computes.
const (
	TargetsConnected = "connected"
	TargetsAll       = "all"
)

// DefaultOptions returns the defaults of DESIGN.md: relay on :9900, metrics
// and health on :9091, mTLS, 24h certificates.
func DefaultOptions() Options {
	return Options{
		ListenAddr:       ":9900",
		AdminAddr:        ":9091",
		DataDir:          "meshrelay-data",
		ServerSANs:       []string{"localhost", "127.0.0.1"},
		CertTTL:          24 * time.Hour,
		Mode:             ModeMTLS,
		Debounce:         50 * time.Millisecond,
		Heartbeat:        10 * time.Second,
		RegisterFailures: 10,
		MaxMessageBytes:  16 << 20,
		Targets:          TargetsConnected,
	}
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ListenAddr, "listen", o.ListenAddr, "relay gRPC address")
	fs.StringVar(&o.AdminAddr, "metrics-addr", o.AdminAddr, "address of /metrics, /healthz and /readyz")
	fs.StringVar(&o.ServerID, "server-id", o.ServerID, "this replica's name (default: host name and a random suffix)")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "directory for the generated CA and admin token")
	fs.StringVar(&o.CACertFile, "ca-cert", o.CACertFile, "CA certificate file (PEM); generated when empty")
	fs.StringVar(&o.CAKeyFile, "ca-key", o.CAKeyFile, "CA private key file (PEM)")
	fs.StringVar(&o.CAChainFile, "ca-chain", o.CAChainFile, "chain from an intermediate CA up to the root (PEM)")
	fs.StringSliceVar(&o.ServerSANs, "san", o.ServerSANs, "DNS names and IPs of the server certificate")
	fs.DurationVar(&o.CertTTL, "cert-ttl", o.CertTTL, "life of agent client certificates")
	fs.StringVar(&o.Mode, "mode", o.Mode, "agent authentication: mtls (client certificates) or tls (token on every stream)")
	fs.BoolVar(&o.InsecureLoopback, "insecure-loopback", o.InsecureLoopback, "serve plaintext gRPC (development only; the listen address must be loopback)")
	fs.StringVar(&o.SharedToken, "shared-token", o.SharedToken, "an install-wide relay identity token any registered cluster may use (off by default)")
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", o.AdminTokenFile, "file with the admin API token (default: DATA-DIR/admin-token, generated)")
	fs.DurationVar(&o.SafeStartWindow, "safe-start-window", o.SafeStartWindow, "longest time safe mode waits for clusters after a cold start (0: wait for all)")
	fs.DurationVar(&o.Debounce, "debounce", o.Debounce, "how long changes are coalesced before translating")
	fs.DurationVar(&o.Heartbeat, "heartbeat", o.Heartbeat, "heartbeat interval on agent streams")
	fs.StringVar(&o.Targets, "targets", o.Targets, "whose outputs this replica computes: connected (the clusters whose agents are connected to it, so replicas divide the work) or all")
}

// Validate reports whether the options can work.
func (o *Options) Validate() error {
	var errs []error
	if o.Mode != ModeMTLS && o.Mode != ModeTLS {
		errs = append(errs, fmt.Errorf("--mode must be %q or %q, not %q", ModeMTLS, ModeTLS, o.Mode))
	}
	if o.InsecureLoopback && !isLoopback(o.ListenAddr) {
		errs = append(errs, fmt.Errorf("--insecure-loopback needs a loopback --listen address, not %q", o.ListenAddr))
	}
	if (o.CACertFile == "") != (o.CAKeyFile == "") {
		errs = append(errs, errors.New("--ca-cert and --ca-key go together"))
	}
	if o.CertTTL < time.Second {
		errs = append(errs, fmt.Errorf("--cert-ttl %s is too short (minimum 1s)", o.CertTTL))
	}
	if o.SafeStartWindow < 0 {
		errs = append(errs, errors.New("--safe-start-window must not be negative"))
	}
	if o.Heartbeat <= 0 {
		errs = append(errs, errors.New("--heartbeat must be positive"))
	}
	if o.Targets != TargetsConnected && o.Targets != TargetsAll {
		errs = append(errs, fmt.Errorf("--targets must be %q or %q, not %q", TargetsConnected, TargetsAll, o.Targets))
	}
	return errors.Join(errs...)
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
