package pki

import (
	"net"
	"strings"
)

// IsLoopbackAddr reports whether addr, a host:port or a comma-separated
// list of them, names only loopback hosts ("localhost" or a loopback IP):
// the only places plaintext connections may go.
func IsLoopbackAddr(addr string) bool {
	found := false
	for _, a := range strings.Split(addr, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return false
		}
		ip := net.ParseIP(host)
		if !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
			return false
		}
		found = true
	}
	return found
}
