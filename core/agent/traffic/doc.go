// Package traffic receives, in the agent, the metrics the cluster's
// proxies send, and folds them into edges (core/traffic) over fixed
// 10-second windows that the agent relays to the server:
//
//   - Envoy's metrics service (envoy.service.metrics.v3.MetricsService,
//     StreamMetrics): the Prometheus metric families Envoy and Istio's
//     sidecars stream with their tags as labels — Istio's standard
//     metrics (istio_requests_total, istio_request_duration_milliseconds,
//     istio_request_bytes, istio_response_bytes, istio_tcp_*_bytes_total)
//     and, from proxies that send none of those, Envoy's cluster stats
//     (upstream_rq_xx, upstream_rq_time, upstream_cx_*_bytes_total);
//   - OTLP metrics over gRPC (opentelemetry.proto.collector.metrics.v1,
//     Export), as proxyless gRPC clients send them through grpc-go's
//     OpenTelemetry plugin (grpc.client.attempt.duration,
//     grpc.client.attempt.{sent,rcvd}_total_compressed_message_size).
//
// A request is counted once, by its caller: Istio's reports with
// reporter="destination" count only when the caller is unknown (it has no
// sidecar), and a gRPC server's own metrics are not read.
//
// Counters and histograms arrive cumulative (Envoy; OTLP unless delta
// temporality): the receiver keeps each series' last value and adds the
// difference. A series first seen counts from its first value, unless
// OTLP says it started after the receiver did. A series whose values went
// down, or whose OTLP start time moved on (its client restarted), was
// reset: its values count in full.
//
// Everything is bounded ([Options]): the size of a message (the gRPC
// server's limit, [Receiver.ServerOptions]), the metrics streams open at
// once, the series one Envoy stream keeps, the series the OTLP receiver
// keeps and the data points of one Export, and the edges of a window —
// the label cardinality of the cluster. What a limit drops is counted by
// reason, relayed with the next window and logged.
//
// The receiver serves beside the agent's xDS server on its port (9977):
// [Receiver.Register] adds both services to that gRPC server, so proxies
// reach it where they already reach the agent, with the same transport
// and exposure.
package traffic
