// Package traffic is the model of the traffic between workloads that
// agents relay and servers serve: an [Edge] (a source workload, a
// destination service and cluster, a protocol) and its [Stats] over a
// window (requests by code [Class], errors, bytes, a latency histogram
// over the fixed [Bounds]).
//
// The agent folds what its proxies report into a [Window] and, when the
// window closes, an [Encoder] turns it into a compact
// relayv1.TrafficWindow: each edge is named once per stream and referred
// to by a small id after, its counts one packed column of varints, so that
// a window of 200 steady edges takes about 9 bytes per edge. The server's
// [Decoder] checks a window against its [Limits] before trusting any of
// it, and its [Hour] keeps, per edge, the counters Prometheus scrapes and
// the last hour of traffic:
//
//   - the last minute in its six 10-second windows (rates, error rate,
//     latency percentiles now),
//   - requests and errors per minute over the hour (error rate before and
//     after a change),
//   - the totals since the edge was first seen (/metrics).
//
// That is about 1.9 KiB per edge ([Hour.Bytes] estimates what it holds;
// Go's heap and maps bring a process to about twice that), and
// [Hour.MaxEdges] bounds the edges a replica keeps; history beyond the
// hour belongs to Prometheus.
package traffic
