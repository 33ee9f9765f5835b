package server

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/spf13/pflag"
)

// Modes of agent authentication, the ones the agent knows (package pki
// defines them for both).
const (
	// ModeMTLS: agents register with a token once, then use client certificates.
	ModeMTLS = pki.ModeMTLS
	// ModeTLS: server-authenticated TLS, and the token on every stream.
	ModeTLS = pki.ModeTLS
)

// Options configure a Server.
type Options struct {
	// ListenAddr is the relay's gRPC address.
	ListenAddr string
	// AdminAddr serves /metrics, /healthz and /readyz over HTTP.
	AdminAddr string
	// ServerID names this replica; default: the host name and a random suffix.
	ServerID string
	// AdvertiseAddr is where the other replicas reach this one's admin API
	// (host:port of ListenAddr as they see it), announced in the store so
	// that each can answer for the whole fleet's traffic (peers.go). Empty:
	// not announced; the replica's traffic is then in its own answers only.
	AdvertiseAddr string
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
	// SharedToken, when set, is an install-wide relay identity token the
	// clusters registered with allow_shared_token may use. Off by default.
	// Prefer SharedTokenFile or the MESHRELAY_SHARED_TOKEN environment
	// variable: a flag's value shows in the process list.
	SharedToken string
	// SharedTokenFile holds the shared token; it sets SharedToken.
	SharedTokenFile string
	// TokenTTL is the life of relay identity tokens registered without one.
	TokenTTL time.Duration
	// CAKeyEncryptionKeyFile holds the secret that encrypts the CA's
	// private key (and the mesh roots') in the store (AES-256-GCM under a
	// key derived from it). Every replica sharing a store needs the same
	// one. When empty, the MESHRELAY_CA_KEY_ENCRYPTION_KEY environment
	// variable is used, else DATA-DIR/ca-key-encryption-key, generated on
	// first start: replicas with data directories of their own then need
	// a copy of it.
	CAKeyEncryptionKeyFile string
	// CAKeyEncryptionKey is the secret itself, when not read from a file.
	CAKeyEncryptionKey string
	// AdminTokenFile holds the admin API token; generated in DataDir when empty.
	AdminTokenFile string
	// SafeStartWindow bounds safe mode; 0 waits for every cluster.
	SafeStartWindow time.Duration
	// Debounce and DebounceMax are the engine's window and its longest
	// wait for a burst of changes to pause (engine.Options).
	Debounce, DebounceMax time.Duration
	// Heartbeat is how often the server heartbeats on the streams of
	// agents that announce no server timeout, and at most how often on the
	// others (StreamHeartbeat); and how often it records its agents' last
	// contact in the store (touchLastSeen).
	Heartbeat time.Duration
	// Keepalive is how long an agent's connection may stay without a byte
	// from the agent before the server pings it over HTTP/2, never less
	// than Heartbeat; without an answer in KeepaliveTimeout the server
	// closes the connection. Agents send nothing while idle (no
	// heartbeat), so this is how often the server pings an idle agent.
	// It is the backstop: gRPC sets TCP_USER_TIMEOUT to KeepaliveTimeout
	// on every connection, so the server's heartbeat (or any write) to an
	// agent whose network died goes unacknowledged and closes the
	// connection within KeepaliveTimeout; the ping finds a dead agent
	// behind a proxy that acknowledges for it.
	Keepalive, KeepaliveTimeout time.Duration
	// RolloutInterval is how often a staged rollout's clusters are judged
	// and the rollout advanced (rollout.go).
	RolloutInterval time.Duration
	// RegisterFailures is how many failed registrations a client address may
	// make per minute before it is refused with ResourceExhausted.
	RegisterFailures int
	// MaxMessageBytes bounds gRPC messages of authenticated agents; larger
	// deltas are split.
	MaxMessageBytes int
	// MaxUnauthenticatedMessageBytes bounds every message received on a
	// connection without a verified client certificate under mTLS:
	// registration, the admin API. (In --mode tls agents send their inputs
	// on such connections, so MaxMessageBytes applies.)
	MaxUnauthenticatedMessageBytes int
	// HelloTimeout is how long a new Sync stream may take to send its Hello.
	HelloTimeout time.Duration
	// HandshakeTimeout bounds a connection's TLS handshake.
	HandshakeTimeout time.Duration
	// MaxConnections bounds open connections; MaxConnectionsPerPeer bounds
	// those of one client address that are not authenticated by a client
	// certificate (in handshake, registering, admin calls, --mode tls).
	MaxConnections, MaxConnectionsPerPeer int
	// MaxConnectionsPerCluster bounds the authenticated connections of one
	// cluster (by client certificate, or in --mode tls by the token its
	// streams carry); an agent uses one, and one more for a moment to
	// renew or report trust.
	MaxConnectionsPerCluster int
	// ReservedConnections of MaxConnections are kept from authenticated
	// agents, for registrations, the admin API and other newcomers; 0: a
	// tenth of MaxConnections.
	ReservedConnections int
	// MaxClusterBytesInFlight bounds the bytes of unfinished messages one
	// cluster's connections hold together: each message counts from its
	// first bytes, at its declared length, until it is complete.
	MaxClusterBytesInFlight int
	// MaxStreamsPerConnection bounds concurrent streams (calls) on one
	// connection; a connection without a client certificate gets at most 8.
	MaxStreamsPerConnection int
	// MaxInputParts, MaxInputBytes and MaxInputResources bound one
	// cluster's input: the parts, bytes (IDs and deletes included) and
	// resources its unfinished deltas hold, on all its streams together,
	// and the bytes and resources of its whole input snapshot. An input
	// over a limit is nacked with the limit's name.
	MaxInputParts, MaxInputBytes, MaxInputResources int
	// Targets says whose outputs the replica computes: TargetsConnected,
	// the clusters whose agents are connected to it (replicas divide the
	// work), or TargetsAll, every cluster of the fleet.
	Targets string
	// RebalanceInterval is how often the replica announces how many
	// agents it serves and, when above its fair share, asks a few to move
	// to another replica (rebalance.go); 0 turns rebalancing off.
	RebalanceInterval time.Duration
	// MaxConnectionAge closes an agent's connection after this long (with
	// a GOAWAY; the agent reconnects to the next server address), the
	// backstop of rebalancing; 0 keeps connections open.
	MaxConnectionAge time.Duration
	// TrafficMaxEdges bounds the traffic edges the replica keeps in
	// memory (the last hour; about 2 KiB each, core/traffic).
	TrafficMaxEdges int

	// catalogWarmEvery and catalogWarmFor, when set, replace the
	// constants of those names (tests).
	catalogWarmEvery, catalogWarmFor time.Duration
}

// Whose outputs a replica computes.
const (
	TargetsConnected = "connected"
	TargetsAll       = "all"
)

// DefaultOptions returns the documented defaults (README, Configuration): relay on :9900, metrics
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
		DebounceMax:      time.Second,
		Heartbeat:        10 * time.Second,
		Keepalive:        2 * time.Minute,
		KeepaliveTimeout: 10 * time.Second,
		RolloutInterval:  time.Second,
		RegisterFailures: 10,
		MaxMessageBytes:  16 << 20,
		Targets:          TargetsConnected,
		TokenTTL:         24 * time.Hour,

		MaxUnauthenticatedMessageBytes: 64 << 10,
		HelloTimeout:                   10 * time.Second,
		HandshakeTimeout:               10 * time.Second,
		MaxConnections:                 20000,
		MaxConnectionsPerPeer:          256,
		MaxConnectionsPerCluster:       8,
		MaxClusterBytesInFlight:        40 << 20,
		MaxStreamsPerConnection:        100,
		MaxInputParts:                  1024,
		MaxInputBytes:                  128 << 20,
		MaxInputResources:              200000,
		RebalanceInterval:              time.Second,
		MaxConnectionAge:               time.Hour,
		TrafficMaxEdges:                200000,
	}
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ListenAddr, "listen", o.ListenAddr, "relay gRPC address")
	fs.StringVar(&o.AdminAddr, "metrics-addr", o.AdminAddr, "address of /metrics, /healthz and /readyz")
	fs.StringVar(&o.ServerID, "server-id", o.ServerID, "this replica's name (default: host name and a random suffix)")
	fs.StringVar(&o.AdvertiseAddr, "advertise-addr", o.AdvertiseAddr, "host:port where the other replicas reach this one's --listen address, so that each answers for the whole fleet's traffic (e.g. $(POD_IP):9900; default: not announced)")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "directory for the generated CA and admin token")
	fs.StringVar(&o.CACertFile, "ca-cert", o.CACertFile, "CA certificate file (PEM); generated when empty")
	fs.StringVar(&o.CAKeyFile, "ca-key", o.CAKeyFile, "CA private key file (PEM)")
	fs.StringVar(&o.CAChainFile, "ca-chain", o.CAChainFile, "chain from an intermediate CA up to the root (PEM)")
	fs.StringSliceVar(&o.ServerSANs, "san", o.ServerSANs, "DNS names and IPs of the server certificate")
	fs.DurationVar(&o.CertTTL, "cert-ttl", o.CertTTL, "life of agent client certificates")
	fs.StringVar(&o.Mode, "mode", o.Mode, "agent authentication: mtls (client certificates) or tls (token on every stream)")
	fs.BoolVar(&o.InsecureLoopback, "insecure-loopback", o.InsecureLoopback, "serve plaintext gRPC (development only; the listen address must be loopback)")
	fs.StringVar(&o.SharedToken, "shared-token", o.SharedToken, "an install-wide relay identity token for clusters registered with --allow-shared-token (off by default; visible in the process list: prefer --shared-token-file or MESHRELAY_SHARED_TOKEN)")
	fs.StringVar(&o.SharedTokenFile, "shared-token-file", o.SharedTokenFile, "file holding the shared token")
	fs.DurationVar(&o.TokenTTL, "token-ttl", o.TokenTTL, "life of relay identity tokens registered without --token-ttl")
	fs.StringVar(&o.CAKeyEncryptionKeyFile, "ca-key-encryption-key-file", o.CAKeyEncryptionKeyFile, "file with the secret that encrypts the CA key in the store, the same on every replica (default: MESHRELAY_CA_KEY_ENCRYPTION_KEY, else DATA-DIR/ca-key-encryption-key, generated)")
	fs.IntVar(&o.MaxUnauthenticatedMessageBytes, "max-unauthenticated-message-bytes", o.MaxUnauthenticatedMessageBytes, "largest message accepted from a client without a certificate (mtls mode)")
	fs.DurationVar(&o.HelloTimeout, "hello-timeout", o.HelloTimeout, "how long a new agent stream may take to send its Hello")
	fs.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, "most open relay connections")
	fs.IntVar(&o.MaxConnectionsPerPeer, "max-connections-per-peer", o.MaxConnectionsPerPeer, "most open relay connections from one client address without a client certificate")
	fs.IntVar(&o.MaxConnectionsPerCluster, "max-connections-per-cluster", o.MaxConnectionsPerCluster, "most open relay connections authenticated as one cluster")
	fs.IntVar(&o.ReservedConnections, "reserved-connections", o.ReservedConnections, "connections of --max-connections kept from authenticated agents for registrations and the admin API (0: a tenth)")
	fs.IntVar(&o.MaxClusterBytesInFlight, "max-cluster-bytes-in-flight", o.MaxClusterBytesInFlight, "most bytes of unfinished messages one cluster's connections may hold (at least --max-message-bytes)")
	fs.IntVar(&o.MaxStreamsPerConnection, "max-streams-per-connection", o.MaxStreamsPerConnection, "most concurrent calls on one connection (8 without a client certificate)")
	fs.IntVar(&o.MaxInputParts, "max-input-parts", o.MaxInputParts, "most parts of the input deltas one cluster has under way")
	fs.IntVar(&o.MaxInputBytes, "max-input-bytes", o.MaxInputBytes, "most bytes (IDs and deletes included) of the input deltas one cluster has under way, and of its whole input")
	fs.IntVar(&o.MaxInputResources, "max-input-resources", o.MaxInputResources, "most resources of the input deltas one cluster has under way, and of its whole input")
	fs.IntVar(&o.TrafficMaxEdges, "traffic-max-edges", o.TrafficMaxEdges, "most traffic edges (workload → destination) kept in memory for the last hour, about 2 KiB each")
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", o.AdminTokenFile, "file with the admin API token (default: DATA-DIR/admin-token, generated)")
	fs.DurationVar(&o.SafeStartWindow, "safe-start-window", o.SafeStartWindow, "longest time safe mode waits for clusters after a cold start (0: wait for all)")
	fs.DurationVar(&o.Debounce, "debounce", o.Debounce, "the engine's window: a change a window or more after the last translation is translated at once; sooner, it is part of a burst, translated once no change has come for a window")
	fs.DurationVar(&o.DebounceMax, "debounce-max", o.DebounceMax, "longest wait for a burst of changes to pause before translating it")
	fs.DurationVar(&o.Heartbeat, "heartbeat", o.Heartbeat, "heartbeat interval on the streams of agents that announce no --server-timeout (older agents), and the shortest on the others, which get a third of theirs; also how often the agents' last contact is written to the store")
	fs.DurationVar(&o.Keepalive, "keepalive", o.Keepalive, "ping an agent over HTTP/2 after this long without a byte from it (at least --heartbeat), and close its connection when no answer comes within --keepalive-timeout; a dead agent is found sooner by the server's heartbeat going unacknowledged for --keepalive-timeout, unless a proxy acknowledges for it")
	fs.DurationVar(&o.KeepaliveTimeout, "keepalive-timeout", o.KeepaliveTimeout, "how long the server waits for the answer to a keepalive ping, and for the agent to acknowledge what it sent (TCP_USER_TIMEOUT)")
	fs.DurationVar(&o.RebalanceInterval, "rebalance-interval", o.RebalanceInterval, "how often this replica announces its agents and, above its fair share of the live replicas, asks a few to move (0: never)")
	fs.DurationVar(&o.MaxConnectionAge, "max-connection-age", o.MaxConnectionAge, "close an agent's connection after this long, so it reconnects to the next server address (0: never)")
	fs.DurationVar(&o.RolloutInterval, "rollout-interval", o.RolloutInterval, "how often a staged rollout's released clusters are judged and the rollout advanced")
	fs.StringVar(&o.Targets, "targets", o.Targets, "whose outputs this replica computes: connected (the clusters whose agents are connected to it, so replicas divide the work) or all")
}

// Validate reports whether the options can work.
func (o *Options) Validate() error {
	var errs []error
	if o.RolloutInterval <= 0 {
		errs = append(errs, fmt.Errorf("--rollout-interval must be positive, not %s", o.RolloutInterval))
	}
	if o.Mode != ModeMTLS && o.Mode != ModeTLS {
		errs = append(errs, fmt.Errorf("--mode must be %q or %q, not %q", ModeMTLS, ModeTLS, o.Mode))
	}
	if o.AdvertiseAddr != "" {
		if host, port, err := net.SplitHostPort(o.AdvertiseAddr); err != nil || host == "" || port == "" || len(o.AdvertiseAddr) > 512 {
			errs = append(errs, fmt.Errorf("--advertise-addr must be host:port, not %q", o.AdvertiseAddr))
		}
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
	if o.Keepalive <= 0 || o.KeepaliveTimeout <= 0 {
		errs = append(errs, errors.New("--keepalive and --keepalive-timeout must be positive"))
	}
	if o.SharedToken != "" && o.SharedTokenFile != "" {
		errs = append(errs, errors.New("--shared-token and --shared-token-file exclude each other"))
	}
	if o.TokenTTL <= 0 {
		errs = append(errs, errors.New("--token-ttl must be positive"))
	}
	for _, l := range []struct {
		flag string
		v    int
	}{
		{"--max-unauthenticated-message-bytes", o.MaxUnauthenticatedMessageBytes}, {"--max-connections", o.MaxConnections},
		{"--max-connections-per-peer", o.MaxConnectionsPerPeer}, {"--max-streams-per-connection", o.MaxStreamsPerConnection},
		{"--max-connections-per-cluster", o.MaxConnectionsPerCluster}, {"--max-cluster-bytes-in-flight", o.MaxClusterBytesInFlight},
		{"--max-input-parts", o.MaxInputParts}, {"--max-input-bytes", o.MaxInputBytes}, {"--max-input-resources", o.MaxInputResources},
	} {
		if l.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", l.flag))
		}
	}
	if o.ReservedConnections < 0 || o.ReservedConnections >= o.MaxConnections {
		errs = append(errs, errors.New("--reserved-connections must be at least 0 and less than --max-connections"))
	}
	if o.MaxClusterBytesInFlight < o.MaxMessageBytes {
		errs = append(errs, fmt.Errorf("--max-cluster-bytes-in-flight %d is less than one message of %d bytes", o.MaxClusterBytesInFlight, o.MaxMessageBytes))
	}
	if o.HelloTimeout <= 0 {
		errs = append(errs, errors.New("--hello-timeout must be positive"))
	}
	if o.Targets != TargetsConnected && o.Targets != TargetsAll {
		errs = append(errs, fmt.Errorf("--targets must be %q or %q, not %q", TargetsConnected, TargetsAll, o.Targets))
	}
	return errors.Join(errs...)
}

// reservedConnections is ReservedConnections or its default.
func (o *Options) reservedConnections() int {
	if o.ReservedConnections > 0 {
		return o.ReservedConnections
	}
	return o.MaxConnections / 10
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
