// Package tcpproxy forwards TCP connections from a loopback listener to one
// target address, and can cut them: Cut closes every forwarded connection
// and refuses new ones until Restore. It stands between one client and a
// server that others keep reaching directly, as a network partition of
// that client alone would: the chaos soak (internal/bench) cuts one server
// replica off from Redis with it, and the store's tests do the same.
package tcpproxy
