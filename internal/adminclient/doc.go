// Package adminclient dials a management server's admin API as an
// administrator: TLS trusting the server's CA bundle (or plaintext to a
// loopback address), and the admin token as "Authorization: Bearer" on
// every call. The CLI (meshrelay get, describe, cluster …), the demo and
// the fleet benchmark all connect with it.
//
//	c, err := adminclient.Dial(adminclient.Options{Addr: "127.0.0.1:9900", CABundle: ca, TokenFile: "meshrelay-data/admin-token"})
//	defer c.Close()
//	st, err := c.GetStatus(c.Context(ctx), &relayv1.GetStatusRequest{})
package adminclient
