package traffic

import (
	"errors"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/service/metrics/v3"
	"github.com/meshrelay/meshrelay/core/traffic"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// envoyService serves Envoy's metrics service.
type envoyService struct{ r *Receiver }

// StreamMetrics reads one proxy's stream: its node in the first message,
// metric families in every message.
func (s envoyService) StreamMetrics(stream grpc.ClientStreamingServer[metricsv3.StreamMetricsMessage, metricsv3.StreamMetricsResponse]) error {
	r := s.r
	release, ok := r.acquire()
	if !ok {
		r.window.Drop(traffic.DropRefused, 1)
		return status.Error(codes.ResourceExhausted, errBusy.Error())
	}
	defer release()
	last := newSeries(r.opts.MaxSeriesPerStream)
	last.shared, last.sharedMax = &r.envoySeries, int64(r.opts.MaxSeries)
	defer last.release()
	st := &envoyStream{r: r, last: last}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&metricsv3.StreamMetricsResponse{})
			}
			return err
		}
		if id := msg.GetIdentifier(); id != nil && st.source == "" {
			st.source = nodeWorkload(id.GetNode())
		}
		st.read(msg.GetEnvoyMetrics(), time.Now())
	}
}

// envoyStream is what the receiver keeps of one proxy's stream.
type envoyStream struct {
	r      *Receiver
	source string // the proxy's workload, for Envoy's cluster stats
	last   *series
}

// read folds one message's families into the window.
func (st *envoyStream) read(families []*dto.MetricFamily, now time.Time) {
	istio := false
	for _, f := range families {
		if strings.HasPrefix(statName(f.GetName()), "istio_") {
			istio = true
			break
		}
	}
	acc := map[traffic.Edge]*traffic.Stats{}
	for _, f := range families {
		name := statName(f.GetName())
		for _, m := range f.GetMetric() {
			labels := labelMap(m.GetLabel())
			var e traffic.Edge
			var ok bool
			if istio {
				e, ok = st.istioEdge(name, labels)
			} else {
				e, ok = st.clusterEdge(name, labels)
			}
			if !ok {
				continue
			}
			st.fold(name, m, labels, e, acc, now)
		}
	}
	for e, s := range acc {
		st.r.window.Add(e, s)
	}
}

// fold adds one metric's growth to its edge in acc.
func (st *envoyStream) fold(name string, m *dto.Metric, labels map[string]string, e traffic.Edge, acc map[traffic.Edge]*traffic.Stats, now time.Time) {
	var values []float64
	if h := m.GetHistogram(); h != nil {
		for _, b := range h.GetBucket() {
			values = append(values, float64(b.GetCumulativeCount()))
		}
		values = append(values, float64(h.GetSampleCount()), h.GetSampleSum())
	} else if c := m.GetCounter(); c != nil {
		values = []float64{c.GetValue()}
	} else {
		return
	}
	key := seriesKey(name, labelPairs(m.GetLabel())...)
	d, kept := st.last.delta(key, values, 0, false, now)
	if !kept {
		st.r.window.Drop(traffic.DropSeries, 1)
		return
	}
	if d == nil {
		return
	}
	s := acc[e]
	if s == nil {
		s = &traffic.Stats{}
		acc[e] = s
	}
	switch name {
	case "istio_requests_total":
		s.Codes[istioClass(labels)] += count(d[0])
	case "envoy_cluster_upstream_rq_xx", "cluster_upstream_rq_xx":
		class, _ := strconv.Atoi(labels["envoy_response_code_class"])
		s.Codes[traffic.HTTPClass(class*100)] += count(d[0])
	case "istio_request_duration_milliseconds", "envoy_cluster_upstream_rq_time", "cluster_upstream_rq_time":
		foldHistogram(s, m.GetHistogram().GetBucket(), d, 1)
	case "istio_request_bytes":
		s.BytesSent += count(d[len(d)-1])
	case "istio_response_bytes":
		s.BytesReceived += count(d[len(d)-1])
	case "istio_tcp_sent_bytes_total", "envoy_cluster_upstream_cx_tx_bytes_total", "cluster_upstream_cx_tx_bytes_total":
		s.BytesSent += count(d[0])
	case "istio_tcp_received_bytes_total", "envoy_cluster_upstream_cx_rx_bytes_total", "cluster_upstream_cx_rx_bytes_total":
		s.BytesReceived += count(d[0])
	}
}

// foldHistogram adds a histogram's growth d (per cumulative bucket, then
// count and sum) to s's latency, the bounds scaled by scale to
// milliseconds.
func foldHistogram(s *traffic.Stats, buckets []*dto.Bucket, d []float64, scale float64) {
	prev := 0.0
	for i, b := range buckets {
		n := d[i] - prev
		prev = d[i]
		if n > 0 {
			s.Latency[traffic.Bucket(b.GetUpperBound()*scale)] += count(n)
		}
	}
	if rest := d[len(buckets)] - prev; rest > 0 {
		s.Latency[traffic.NumBuckets-1] += count(rest)
	}
	s.LatencySumMS += math.Max(0, d[len(buckets)+1]*scale)
}

func count(v float64) uint64 {
	if v <= 0 || math.IsNaN(v) {
		return 0
	}
	return uint64(math.Round(min(v, 1<<50)))
}

// istioFamilies are the Istio metrics the receiver reads.
var istioFamilies = map[string]bool{
	"istio_requests_total": true, "istio_request_duration_milliseconds": true,
	"istio_request_bytes": true, "istio_response_bytes": true,
	"istio_tcp_sent_bytes_total": true, "istio_tcp_received_bytes_total": true,
}

// istioEdge returns the edge of one of Istio's metrics, and false for a
// metric not read or a request its caller reports.
func (st *envoyStream) istioEdge(name string, l map[string]string) (traffic.Edge, bool) {
	if !istioFamilies[name] {
		return traffic.Edge{}, false
	}
	source := workload(l["source_workload_namespace"], l["source_workload"])
	if l["reporter"] == "destination" && source != "unknown" {
		return traffic.Edge{}, false
	}
	dest := "unknown"
	if ns, n := l["destination_service_namespace"], l["destination_service_name"]; known(ns) && known(n) {
		dest = ns + "/" + n
	} else if h := l["destination_service"]; known(h) {
		dest = serviceFromHost(h)
	}
	protocol := l["request_protocol"]
	if strings.HasPrefix(name, "istio_tcp_") {
		protocol = "tcp"
	}
	cluster := l["destination_cluster"]
	if !known(cluster) {
		cluster = st.r.opts.Cluster
	}
	return traffic.Edge{SourceWorkload: source, DestinationCluster: cluster, DestinationService: dest, Protocol: strings.ToLower(cmpOr(protocol, "http"))}, true
}

// istioClass returns the class of an istio_requests_total series.
func istioClass(l map[string]string) traffic.Class {
	if g := l["grpc_response_status"]; l["request_protocol"] == "grpc" && g != "" {
		return traffic.GRPCClass(g)
	}
	code, _ := strconv.Atoi(l["response_code"])
	return traffic.HTTPClass(code)
}

// envoyClusterStats are Envoy's cluster stats the receiver reads.
var envoyClusterStats = map[string]bool{
	"envoy_cluster_upstream_rq_xx": true, "envoy_cluster_upstream_rq_time": true,
	"envoy_cluster_upstream_cx_tx_bytes_total": true, "envoy_cluster_upstream_cx_rx_bytes_total": true,
	"cluster_upstream_rq_xx": true, "cluster_upstream_rq_time": true,
	"cluster_upstream_cx_tx_bytes_total": true, "cluster_upstream_cx_rx_bytes_total": true,
}

// clusterEdge returns the edge of one of Envoy's cluster stats: the
// proxy's workload to the service of the upstream cluster.
func (st *envoyStream) clusterEdge(name string, l map[string]string) (traffic.Edge, bool) {
	if !envoyClusterStats[name] {
		return traffic.Edge{}, false
	}
	c := l["envoy_cluster_name"]
	if c == "" || internalCluster(c) {
		return traffic.Edge{}, false
	}
	dest := c
	if parts := strings.Split(c, "|"); len(parts) == 4 && parts[0] == "outbound" {
		dest = serviceFromHost(parts[3])
	}
	return traffic.Edge{SourceWorkload: cmpOr(st.source, "unknown"), DestinationCluster: st.r.opts.Cluster, DestinationService: dest, Protocol: "http"}, true
}

// internalCluster reports whether an Envoy cluster is the proxy's own
// plumbing, not a destination.
func internalCluster(c string) bool {
	switch c {
	case "xds-grpc", "xds_cluster", "sds-grpc", "prometheus_stats", "agent", "BlackHoleCluster", "PassthroughCluster", "metrics_service":
		return true
	}
	return strings.HasPrefix(c, "inbound|") || strings.HasPrefix(c, "InboundPassthroughCluster")
}

// nodeWorkload returns a proxy's workload: Istio's node metadata
// (NAMESPACE, WORKLOAD_NAME), else the node's cluster or ID.
func nodeWorkload(n *corev3.Node) string {
	if n == nil {
		return ""
	}
	md := n.GetMetadata().GetFields()
	if ns, w := md["NAMESPACE"].GetStringValue(), md["WORKLOAD_NAME"].GetStringValue(); ns != "" && w != "" {
		return ns + "/" + w
	}
	if c := n.GetCluster(); c != "" {
		if name, ns, ok := strings.Cut(c, "."); ok && !strings.Contains(ns, ".") {
			return ns + "/" + name
		}
		return c
	}
	return n.GetId()
}

// statName returns a family's name as Prometheus writes it: Envoy sends
// "cluster.upstream_rq_xx" where /stats/prometheus says
// "envoy_cluster_upstream_rq_xx".
func statName(n string) string { return strings.ReplaceAll(n, ".", "_") }

func labelMap(pairs []*dto.LabelPair) map[string]string {
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		m[statName(p.GetName())] = p.GetValue()
	}
	return m
}

func labelPairs(pairs []*dto.LabelPair) []string {
	out := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		out = append(out, p.GetName(), p.GetValue())
	}
	return out
}

// known reports whether a label has a value Istio did not fill with "unknown".
func known(v string) bool { return v != "" && v != "unknown" }

// workload returns "namespace/name", or "unknown".
func workload(ns, name string) string {
	switch {
	case !known(name):
		return "unknown"
	case !known(ns):
		return name
	}
	return ns + "/" + name
}

// serviceFromHost returns "namespace/name" for a Kubernetes Service's
// host ("name.namespace.svc.cluster.local", with or without a port), and
// the host otherwise.
func serviceFromHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	if net.ParseIP(h) != nil {
		return h
	}
	parts := strings.Split(h, ".")
	if len(parts) >= 3 && parts[2] == "svc" || len(parts) == 2 {
		return parts[1] + "/" + parts[0]
	}
	return h
}
