package traffic

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/core/traffic"
	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// otlpService serves OTLP metrics Export.
type otlpService struct {
	collectorv1.UnimplementedMetricsServiceServer
	r *Receiver
}

// otlpMetrics are the grpc-go OpenTelemetry plugin's client metrics the
// receiver reads.
const (
	attemptDuration = "grpc.client.attempt.duration"
	attemptSent     = "grpc.client.attempt.sent_total_compressed_message_size"
	attemptRcvd     = "grpc.client.attempt.rcvd_total_compressed_message_size"
)

// Export folds one request's client metrics into the window. It refuses
// a request with more data points than Options.MaxPoints, and reports
// what it did not keep as rejected points.
func (s otlpService) Export(ctx context.Context, req *collectorv1.ExportMetricsServiceRequest) (*collectorv1.ExportMetricsServiceResponse, error) {
	r := s.r
	release, ok := r.acquire()
	if !ok {
		r.window.Drop(traffic.DropRefused, 1)
		return nil, status.Error(codes.ResourceExhausted, errBusy.Error())
	}
	defer release()
	points := 0
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				points += len(m.GetHistogram().GetDataPoints()) + len(m.GetSum().GetDataPoints())
			}
		}
	}
	if points > r.opts.MaxPoints {
		r.window.Drop(traffic.DropPoints, uint64(points))
		return nil, status.Errorf(codes.ResourceExhausted, "%d data points, more than %d", points, r.opts.MaxPoints)
	}
	now := time.Now()
	var rejected int64
	acc := map[traffic.Edge]*traffic.Stats{}
	for _, rm := range req.GetResourceMetrics() {
		res := attrs(rm.GetResource().GetAttributes())
		source := otlpWorkload(res)
		resKey := seriesKey("resource", flatten(res)...)
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				h := m.GetHistogram()
				if h == nil || (m.GetName() != attemptDuration && m.GetName() != attemptSent && m.GetName() != attemptRcvd) {
					continue
				}
				delta := h.GetAggregationTemporality() == metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
				for _, p := range h.GetDataPoints() {
					if !r.foldPoint(resKey, source, m.GetName(), p, delta, acc, now) {
						rejected++
					}
				}
			}
		}
	}
	for e, st := range acc {
		r.window.Add(e, st)
	}
	resp := &collectorv1.ExportMetricsServiceResponse{}
	if rejected > 0 {
		resp.PartialSuccess = &collectorv1.ExportMetricsPartialSuccess{RejectedDataPoints: rejected, ErrorMessage: "series limit reached"}
	}
	return resp, nil
}

// foldPoint adds one data point's growth to its edge in acc; false when
// its series was not kept.
func (r *Receiver) foldPoint(resKey uint64, source, name string, p *metricsv1.HistogramDataPoint, delta bool, acc map[traffic.Edge]*traffic.Stats, now time.Time) bool {
	a := attrs(p.GetAttributes())
	e := traffic.Edge{
		SourceWorkload:     source,
		DestinationCluster: r.opts.Cluster,
		DestinationService: targetService(a["grpc.target"]),
		Protocol:           "grpc",
	}
	values := make([]float64, 0, len(p.GetBucketCounts())+1)
	for _, c := range p.GetBucketCounts() {
		values = append(values, float64(c))
	}
	values = append(values, p.GetSum())
	d := values
	if !delta {
		// A series that started after the receiver counts from zero.
		fresh := p.GetStartTimeUnixNano() >= uint64(r.started.UnixNano())
		var kept bool
		d, kept = r.otlp.delta(seriesKey(name, append([]string{strconv.FormatUint(resKey, 16)}, flatten(a)...)...), values, p.GetStartTimeUnixNano(), fresh, now)
		if !kept {
			r.window.Drop(traffic.DropSeries, 1)
			return false
		}
		if d == nil {
			return true
		}
	}
	s := acc[e]
	if s == nil {
		s = &traffic.Stats{}
		acc[e] = s
	}
	var n uint64
	for _, c := range d[:len(d)-1] {
		n += count(c)
	}
	sum := d[len(d)-1]
	switch name {
	case attemptDuration:
		s.Codes[traffic.GRPCClass(a["grpc.status"])] += n
		bounds := p.GetExplicitBounds()
		for i, c := range d[:len(d)-1] {
			if c <= 0 {
				continue
			}
			b := traffic.NumBuckets - 1
			if i < len(bounds) {
				b = traffic.Bucket(bounds[i] * 1000)
			}
			s.Latency[b] += count(c)
		}
		s.LatencySumMS += max(0, sum*1000)
	case attemptSent:
		s.BytesSent += count(sum)
	case attemptRcvd:
		s.BytesReceived += count(sum)
	}
	return true
}

// attrs returns the string values of attributes.
func attrs(kvs []*commonv1.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		if v, ok := kv.GetValue().GetValue().(*commonv1.AnyValue_StringValue); ok {
			m[kv.GetKey()] = v.StringValue
		}
	}
	return m
}

func flatten(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, m[k])
	}
	return out
}

// otlpWorkload returns the workload of an OTLP resource: its Kubernetes
// namespace and workload (k8s.deployment.name, k8s.statefulset.name,
// k8s.daemonset.name), else its service.name.
func otlpWorkload(res map[string]string) string {
	name := cmpOr(res["k8s.deployment.name"], cmpOr(res["k8s.statefulset.name"], cmpOr(res["k8s.daemonset.name"], res["service.name"])))
	return workload(res["k8s.namespace.name"], name)
}

// targetService returns the service a gRPC target names: the host of
// "xds:///reviews.bookinfo:9080" or "dns:///reviews.bookinfo.svc.cluster.local:9080"
// as "bookinfo/reviews".
func targetService(target string) string {
	if target == "" {
		return "unknown"
	}
	if _, rest, ok := strings.Cut(target, "://"); ok {
		target = rest
		if i := strings.Index(target, "/"); i >= 0 {
			target = target[i+1:]
		}
	}
	return serviceFromHost(target)
}
