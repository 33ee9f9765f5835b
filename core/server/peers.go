package server

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A replica keeps the traffic of the agents connected to it (traffic.go).
// To answer for the whole fleet's traffic — the web UI's graph, `meshrelay
// top`, `describe destination`, a policy's error rate before and after its
// change — it asks the other live replicas for their share and merges the
// answers into its own. Replicas find each other in the store's presence
// records (rebalance.go), where each announces the address its peers reach
// its admin API at (--advertise-addr). A peer is asked for its own share
// only (ListEdgesRequest.local), so no question travels further, and with
// the caller's admin token, which every replica of an installation shares.
// A peer that does not answer within peerTimeout, or announced no address,
// is named in the answer's missing list; the rest of the answer stands.

// peerTimeout bounds one peer's answer.
const peerTimeout = 3 * time.Second

// maxPeerAnswer bounds one peer's answer. A policy's traffic asks for the
// hour's edges with their minutes: about 1 KiB an edge with an hour of
// minutes, so 64 MiB holds about 60,000 busy edges a replica.
const maxPeerAnswer = 64 << 20

// peers are the other replicas of the installation, as this one last read
// them from the store, and the connections to those it has asked.
type peers struct {
	s *Server

	mu    sync.Mutex
	known map[string]store.Replica
	conns map[string]*grpc.ClientConn // by address
}

// set records the live replicas (this one included) and closes the
// connections to addresses no live replica announces any more.
func (p *peers) set(replicas map[string]store.Replica) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.known = maps.Clone(replicas)
	live := map[string]bool{}
	for _, r := range replicas {
		live[r.Address] = true
	}
	for addr, c := range p.conns {
		if !live[addr] {
			c.Close()
			delete(p.conns, addr)
		}
	}
}

// close closes every connection.
func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, c := range p.conns {
		c.Close()
		delete(p.conns, addr)
	}
}

// others returns the other live replicas, by name.
func (p *peers) others() map[string]store.Replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := maps.Clone(p.known)
	delete(out, p.s.opts.ServerID)
	return out
}

// conn returns the connection to a peer's address, dialling it the first
// time: TLS verified against the installation's CA for the first of this
// replica's --san names, which every replica's certificate carries, or
// plaintext when this replica serves plaintext (--insecure-loopback).
func (p *peers) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if !p.s.opts.InsecureLoopback {
		var name string
		if len(p.s.opts.ServerSANs) > 0 {
			name = p.s.opts.ServerSANs[0]
		}
		creds = credentials.NewTLS(pki.ClientTLSConfig(pki.ClientTLSOptions{RootCAs: p.s.ca.Pool(), ServerName: name}))
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPeerAnswer)))
	if err != nil {
		return nil, err
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[addr] = c
	return c, nil
}

// listEdges asks every other live replica for its own edges, in
// parallel, with the caller's admin token. It returns the answers and
// the replicas that gave none, each with why, sorted.
func (p *peers) listEdges(ctx context.Context, req *relayv1.ListEdgesRequest) ([]*relayv1.ListEdgesResponse, []string) {
	others := p.others()
	if len(others) == 0 {
		return nil, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	out := metadata.Pairs()
	for _, v := range md.Get("authorization") {
		out.Append("authorization", v)
	}
	ask := proto.Clone(req).(*relayv1.ListEdgesRequest)
	ask.Local = true

	var (
		mu      sync.Mutex
		answers []*relayv1.ListEdgesResponse
		missing []string
		wg      sync.WaitGroup
	)
	for name, r := range others {
		if r.Address == "" {
			mu.Lock()
			missing = append(missing, name+": no --advertise-addr announced")
			mu.Unlock()
			continue
		}
		wg.Go(func() {
			resp, err := p.ask(metadata.NewOutgoingContext(ctx, out), r.Address, ask)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s (%s): %s", name, r.Address, errorText(err)))
				return
			}
			answers = append(answers, resp)
		})
	}
	wg.Wait()
	slices.SortFunc(answers, func(a, b *relayv1.ListEdgesResponse) int { return cmp.Compare(a.GetServerId(), b.GetServerId()) })
	slices.Sort(missing)
	return answers, missing
}

// ask asks one peer for its edges.
func (p *peers) ask(ctx context.Context, addr string, req *relayv1.ListEdgesRequest) (*relayv1.ListEdgesResponse, error) {
	c, err := p.conn(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	return relayv1.NewTrafficClient(c).ListEdges(ctx, req)
}

// errorText is a gRPC error's message without its code's prefix.
func errorText(err error) string {
	if s, ok := status.FromError(err); ok {
		return strings.ToLower(s.Code().String()) + ": " + s.Message()
	}
	return err.Error()
}

// MergeEdges merges the edges several replicas answered: an edge named by
// more than one (its agent moved between them within the window) has its
// counts, rates, bytes, codes and minutes summed and the higher of the
// percentiles, which bound the merged ones from below; drops and missing
// replicas are listed as each replica answered them, and server_id names
// every replica. The answers are not changed.
func MergeEdges(lists []*relayv1.ListEdgesResponse) *relayv1.ListEdgesResponse {
	if len(lists) == 1 {
		return lists[0]
	}
	type key struct{ sc, sw, dc, ds, proto string }
	out := &relayv1.ListEdgesResponse{}
	merged := map[key]*relayv1.Edge{}
	var ids []string
	for _, l := range lists {
		out.Dropped = append(out.Dropped, l.GetDropped()...)
		out.Missing = append(out.Missing, l.GetMissing()...)
		ids = append(ids, l.GetServerId())
		for _, e := range l.GetEdges() {
			k := key{e.GetSourceCluster(), e.GetSourceWorkload(), e.GetDestinationCluster(), e.GetDestinationService(), e.GetProtocol()}
			m, ok := merged[k]
			if !ok {
				m = proto.Clone(e).(*relayv1.Edge)
				merged[k] = m
				out.Edges = append(out.Edges, m)
				continue
			}
			m.Requests += e.GetRequests()
			m.Errors += e.GetErrors()
			m.Rps += e.GetRps()
			m.BytesSent += e.GetBytesSent()
			m.BytesReceived += e.GetBytesReceived()
			m.P50Ms, m.P99Ms = max(m.P50Ms, e.GetP50Ms()), max(m.P99Ms, e.GetP99Ms())
			if e.GetLastSeen().AsTime().After(m.GetLastSeen().AsTime()) {
				m.LastSeen = e.GetLastSeen()
			}
			if len(e.GetCodes()) > 0 && m.Codes == nil {
				m.Codes = map[string]uint64{}
			}
			for c, n := range e.GetCodes() {
				m.Codes[c] += n
			}
			m.Minutes = mergeMinutes(m.Minutes, e.GetMinutes())
			if m.Requests > 0 {
				m.ErrorRate = float64(m.Errors) / float64(m.Requests)
			}
		}
	}
	out.ServerId = strings.Join(ids, ",")
	return out
}

// mergeMinutes sums two edges' per-minute counts, in minute order.
func mergeMinutes(a, b []*relayv1.EdgeMinute) []*relayv1.EdgeMinute {
	byMinute := map[int64]*relayv1.EdgeMinute{}
	for _, m := range slices.Concat(a, b) {
		s, ok := byMinute[m.GetUnixMinute()]
		if !ok {
			s = &relayv1.EdgeMinute{UnixMinute: m.GetUnixMinute()}
			byMinute[m.GetUnixMinute()] = s
		}
		s.Requests += m.GetRequests()
		s.Errors += m.GetErrors()
	}
	out := make([]*relayv1.EdgeMinute, 0, len(byMinute))
	for _, minute := range slices.Sorted(maps.Keys(byMinute)) {
		out = append(out, byMinute[minute])
	}
	return out
}
