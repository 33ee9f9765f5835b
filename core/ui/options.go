package ui

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/meshrelay/meshrelay/core/server"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/spf13/pflag"
)

// Options configure the web UI.
type Options struct {
	// Addr is the UI's address; empty turns the UI off.
	Addr string
	// TLS serves HTTPS with this configuration. Nil serves plain HTTP,
	// which Validate allows only on a loopback address: the admin token
	// travels in every request.
	TLS *tls.Config
	// Poll is how often an open event stream checks the fleet for changes.
	Poll time.Duration
	// MaxStreams bounds the event streams open at once.
	MaxStreams int
	// StreamLife bounds one event stream; the browser reconnects after it.
	StreamLife time.Duration
	// SessionLife is how long a login lasts.
	SessionLife time.Duration
	// MaxSessions bounds the logins kept at once; a new one beyond it ends
	// the one closest to its expiry.
	MaxSessions int
	// Traffic is the Traffic API the UI reads edges from, usually
	// server.Server.TrafficServer; nil serves no traffic.
	Traffic relayv1.TrafficServer
}

// DefaultOptions returns the defaults: off, a one-second poll, 64 streams
// of at most 30 minutes, 256 logins of 12 hours.
func DefaultOptions() Options {
	return Options{Poll: time.Second, MaxStreams: 64, StreamLife: 30 * time.Minute, SessionLife: 12 * time.Hour, MaxSessions: 256}
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "ui-addr", o.Addr, "address of the read-only web UI, behind the admin token (off when empty; HTTPS with the server certificate unless the address is loopback)")
}

// Validate reports whether the options can work.
func (o *Options) Validate() error {
	var errs []error
	if o.Addr != "" && o.TLS == nil && !server.Loopback(o.Addr) {
		errs = append(errs, fmt.Errorf("--ui-addr %q: plain HTTP is served only on a loopback address", o.Addr))
	}
	if o.Poll <= 0 {
		errs = append(errs, errors.New("ui: poll interval must be positive"))
	}
	if o.MaxStreams <= 0 {
		errs = append(errs, errors.New("ui: max streams must be positive"))
	}
	if o.StreamLife <= 0 {
		errs = append(errs, errors.New("ui: stream life must be positive"))
	}
	if o.SessionLife <= 0 {
		errs = append(errs, errors.New("ui: session life must be positive"))
	}
	if o.MaxSessions <= 0 {
		errs = append(errs, errors.New("ui: max sessions must be positive"))
	}
	return errors.Join(errs...)
}
