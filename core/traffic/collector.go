package traffic

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes an Hour's edges to Prometheus:
// meshrelay_edge_requests_total by code class, the latency histogram
// meshrelay_edge_request_duration_milliseconds, meshrelay_edge_bytes_total
// by direction, and what was dropped, meshrelay_traffic_dropped_total.
type Collector struct {
	hour                            *Hour
	requests, latency, bytes, drops *prometheus.Desc
	edges, memory                   *prometheus.Desc
}

var edgeLabels = []string{"source_cluster", "source_workload", "destination_cluster", "destination_service", "protocol"}

// NewCollector returns a collector of h.
func NewCollector(h *Hour) *Collector {
	return &Collector{
		hour: h,
		requests: prometheus.NewDesc("meshrelay_edge_requests_total",
			"Requests from a workload to a destination service, by code class, as the agents relayed them to this replica.",
			append(edgeLabels, "code_class"), nil),
		latency: prometheus.NewDesc("meshrelay_edge_request_duration_milliseconds",
			"Latency of the requests from a workload to a destination service.", edgeLabels, nil),
		bytes: prometheus.NewDesc("meshrelay_edge_bytes_total",
			"Bytes from a workload to a destination service (sent) and back (received).", append(edgeLabels, "direction"), nil),
		drops: prometheus.NewDesc("meshrelay_traffic_dropped_total",
			"Traffic samples, series, edges or windows dropped by a limit, by the reporting cluster and reason.", []string{"cluster", "reason"}, nil),
		edges:  prometheus.NewDesc("meshrelay_traffic_edges", "Edges this replica keeps in memory (the last hour).", nil, nil),
		memory: prometheus.NewDesc("meshrelay_traffic_memory_bytes", "Estimated bytes of the edges this replica keeps.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.latency, c.bytes, c.drops, c.edges, c.memory} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	var metrics []prometheus.Metric
	c.hour.each(func(k Key, s *Stats) {
		labels := []string{k.SourceCluster, k.SourceWorkload, k.DestinationCluster, k.DestinationService, k.Protocol}
		for cl, n := range s.Codes {
			if n > 0 {
				metrics = append(metrics, prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(n), append(labels, Class(cl).String())...))
			}
		}
		if n := s.Latency; n != [NumBuckets]uint64{} {
			buckets := make(map[float64]uint64, len(Bounds))
			var cum, count uint64
			for i, b := range Bounds {
				cum += n[i]
				buckets[b] = cum
			}
			count = cum + n[len(Bounds)]
			metrics = append(metrics, prometheus.MustNewConstHistogram(c.latency, count, s.LatencySumMS, buckets, labels...))
		}
		if s.BytesSent > 0 {
			metrics = append(metrics, prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.BytesSent), append(labels, "sent")...))
		}
		if s.BytesReceived > 0 {
			metrics = append(metrics, prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.BytesReceived), append(labels, "received")...))
		}
	})
	for _, m := range metrics {
		ch <- m
	}
	for cluster, reasons := range c.hour.Dropped() {
		for reason, n := range reasons {
			ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(n), cluster, reason)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.edges, prometheus.GaugeValue, float64(c.hour.Len()))
	ch <- prometheus.MustNewConstMetric(c.memory, prometheus.GaugeValue, float64(c.hour.Bytes()))
}

// FormatBound returns a bucket's bound as Prometheus writes its le label.
func FormatBound(b float64) string { return strconv.FormatFloat(b, 'g', -1, 64) }
