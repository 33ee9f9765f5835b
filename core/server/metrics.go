package server

import (
	"github.com/meshrelay/meshrelay/core/engine"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus metrics. The metrics reference in
// docs/metrics.md lists them.
type metrics struct {
	connected     prometheus.Gauge
	registrations prometheus.Counter
	authFailures  *prometheus.CounterVec
	messages      *prometheus.CounterVec
	bytes         *prometheus.CounterVec
	// in and out are messages' and bytes' counters by message type, looked
	// up once: each heartbeat counts without hashing label values.
	in, out      messageCounters
	inputNacks   prometheus.Counter
	inputLimits  *prometheus.CounterVec
	connRefusals *prometheus.CounterVec
	outputs      prometheus.Counter
	cycles       prometheus.Counter
	cycleSeconds prometheus.Histogram
	cycleBytes   prometheus.Counter
	safeMode     prometheus.Gauge
	rebalanced   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshrelay_relay_connected_agents", Help: "Agents with an open Sync stream on this replica."}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshrelay_relay_registrations_total", Help: "Successful agent registrations."}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshrelay_relay_auth_failures_total", Help: "Refused credentials, by reason."}, []string{"reason"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshrelay_relay_messages_total", Help: "Relay messages, by direction and type."}, []string{"direction", "type"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshrelay_relay_bytes_total", Help: "Relay message bytes, by direction."}, []string{"direction"}),
		inputNacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshrelay_relay_input_nacks_total", Help: "Input deltas refused; the agent resends in full, unless it sent that input whole."}),
		inputLimits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshrelay_relay_input_limit_refusals_total", Help: "Agent inputs refused for exceeding a limit, by limit (parts, bytes, resources)."}, []string{"limit"}),
		connRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshrelay_relay_connection_refusals_total", Help: "Connections and streams refused by a limit, by reason."}, []string{"reason"}),
		outputs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshrelay_engine_outputs_total", Help: "Outputs whose content changed and were handed on."}),
		cycles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshrelay_engine_cycles_total", Help: "Translation cycles."}),
		cycleSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meshrelay_engine_cycle_seconds", Help: "Duration of translation cycles.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		cycleBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshrelay_engine_output_bytes_total", Help: "Bytes of outputs handed on."}),
		safeMode: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshrelay_server_safe_mode", Help: "1 while the server forbids pruning after a cold start."}),
		rebalanced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshrelay_relay_rebalanced_agents_total", Help: "Agents this replica asked to move to another replica, being above its fair share."}),
	}
	reg.MustRegister(m.connected, m.registrations, m.authFailures, m.messages, m.bytes, m.inputNacks, m.inputLimits, m.connRefusals,
		m.outputs, m.cycles, m.cycleSeconds, m.cycleBytes, m.safeMode, m.rebalanced)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshrelay_store_degraded", Help: "1 while the backing store is unreachable and writes are queued."},
		func() float64 {
			if state, _ := s.storeHealth(); state != "ok" {
				return 1
			}
			return 0
		}))
	m.in = newMessageCounters(m, "in", "heartbeat")
	m.out = newMessageCounters(m, "out", "heartbeat")
	reg.MustRegister(&pluginCollector{s: s, desc: prometheus.NewDesc("meshrelay_plugin_healthy",
		"1 when the plugin's last translation succeeded.", []string{"plugin"}, nil)})
	return m
}

func (m *metrics) observeCycle(c engine.CycleStats) {
	m.cycles.Inc()
	m.cycleSeconds.Observe(c.Duration.Seconds())
	m.cycleBytes.Add(float64(c.Bytes))
}

// messageCounters are the counters of one direction.
type messageCounters struct {
	messages map[string]prometheus.Counter
	bytes    prometheus.Counter
}

func newMessageCounters(m *metrics, direction string, types ...string) messageCounters {
	c := messageCounters{messages: map[string]prometheus.Counter{}, bytes: m.bytes.WithLabelValues(direction)}
	for _, t := range types {
		c.messages[t] = m.messages.WithLabelValues(direction, t)
	}
	return c
}

func (c messageCounters) count(m *metrics, direction, typ string, size int) {
	n, ok := c.messages[typ]
	if !ok {
		n = m.messages.WithLabelValues(direction, typ)
	}
	n.Inc()
	c.bytes.Add(float64(size))
}

func (m *metrics) received(msg *relayv1.AgentMessage) {
	m.in.count(m, "in", agentMessageType(msg), messageSize(msg))
}

func (m *metrics) sent(msg *relayv1.ServerMessage) {
	m.out.count(m, "out", serverMessageType(msg), messageSize(msg))
}

func agentMessageType(msg *relayv1.AgentMessage) string {
	switch msg.Msg.(type) {
	case *relayv1.AgentMessage_Hello:
		return "hello"
	case *relayv1.AgentMessage_Input:
		return "input"
	case *relayv1.AgentMessage_Ack:
		return "ack"
	case *relayv1.AgentMessage_Heartbeat:
		return "heartbeat"
	case *relayv1.AgentMessage_Goodbye:
		return "goodbye"
	case *relayv1.AgentMessage_Traffic:
		return "traffic"
	}
	return "unknown"
}

func serverMessageType(msg *relayv1.ServerMessage) string {
	switch msg.Msg.(type) {
	case *relayv1.ServerMessage_Welcome:
		return "welcome"
	case *relayv1.ServerMessage_Output:
		return "output"
	case *relayv1.ServerMessage_Ack:
		return "ack"
	case *relayv1.ServerMessage_Heartbeat:
		return "heartbeat"
	case *relayv1.ServerMessage_Goodbye:
		return "goodbye"
	}
	return "unknown"
}

type pluginCollector struct {
	s    *Server
	desc *prometheus.Desc
}

func (c *pluginCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *pluginCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.s.engine.Status() {
		v := 0.0
		if p.Healthy {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, p.Name)
	}
}
