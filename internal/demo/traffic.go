package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/meshrelay/meshrelay/core/agent"
	agenttraffic "github.com/meshrelay/meshrelay/core/agent/traffic"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/status"
)

// trafficRunner serves an agent's traffic receiver on its own loopback
// listener and relays its windows on the agent's stream.
type trafficRunner struct {
	rec *agenttraffic.Receiver
	a   *agent.Agent
	lis net.Listener
}

func newTrafficRunner(a *agent.Agent, cluster string, window time.Duration, logger *slog.Logger) (*trafficRunner, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &trafficRunner{rec: agenttraffic.New(agenttraffic.Options{Cluster: cluster, Window: window, Logger: logger}), a: a, lis: lis}, nil
}

func (t *trafficRunner) Run(ctx context.Context) error {
	srv := grpc.NewServer(t.rec.ServerOptions()...)
	t.rec.Register(srv)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(t.lis) })
	g.Go(func() error { <-ctx.Done(); srv.Stop(); return nil })
	g.Go(func() error { return t.rec.Run(ctx, t.a) })
	return g.Wait()
}

// Calls describe gRPC calls between two workloads, made by CallsThrough.
type Calls struct {
	// Agent is the address of the traffic receiver both workloads
	// export their metrics to (OTLP over gRPC).
	Agent string
	// Namespace and Client name the calling workload; Server the called
	// one, whose Service host ("name.namespace.svc.cluster.local") the
	// client dials.
	Namespace, Client, Server, Service string
	// Calls is how many calls are made; Failures of them fail with
	// UNAVAILABLE and Slow of the others take at least SlowFor.
	Calls, Failures, Slow int
	SlowFor               time.Duration
	// Every is the wait between calls; none when 0.
	Every time.Duration
	// Export is how often the metrics are exported while calling; only
	// at the end when 0.
	Export time.Duration
}

// CallsThrough makes c's calls from a real grpc-go client to a real
// grpc-go server on loopback (grpc.health.v1.Health/Check), both
// instrumented with grpc-go's OpenTelemetry plugin exporting OTLP to
// c.Agent, and flushes the metrics when done or when ctx ends.
func CallsThrough(ctx context.Context, c Calls) error {
	server, err := meterProvider(ctx, c.Agent, c.Namespace, c.Server, c.Export)
	if err != nil {
		return err
	}
	client, err := meterProvider(ctx, c.Agent, c.Namespace, c.Client, c.Export)
	if err != nil {
		return err
	}
	defer func() {
		flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = client.Shutdown(flush)
		_ = server.Shutdown(flush)
	}()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer(opentelemetry.ServerOption(opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: server}}))
	healthpb.RegisterHealthServer(srv, health{slowFor: c.SlowFor})
	go srv.Serve(lis)
	defer srv.Stop()
	// The client dials the Service's name, as a workload does; the
	// dialer takes it to the server on loopback.
	target := fmt.Sprintf("passthrough:///%s:9080", c.Service)
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", lis.Addr().String())
		}),
		opentelemetry.DialOption(opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: client}}))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for i := range c.Calls {
		kind := ""
		switch {
		case i < c.Failures:
			kind = "fail"
		case i < c.Failures+c.Slow:
			kind = "slow"
		}
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: kind})
		if ctx.Err() != nil {
			return nil
		}
		if (kind == "fail") != (status.Code(err) == codes.Unavailable) {
			return fmt.Errorf("call %d (%q): %w", i, kind, err)
		}
		if c.Every > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(c.Every):
			}
		}
	}
	return nil
}

// meterProvider exports a workload's metrics to the agent at addr.
func meterProvider(ctx context.Context, addr, namespace, workload string, every time.Duration) (*sdkmetric.MeterProvider, error) {
	exp, err := otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpoint(addr), otlpmetricgrpc.WithInsecure())
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	if every == 0 {
		every = time.Hour
	}
	res := resource.NewSchemaless(attribute.String("k8s.namespace.name", namespace), attribute.String("k8s.deployment.name", workload),
		attribute.String("service.name", workload))
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(every))), sdkmetric.WithResource(res)), nil
}

// health answers Check: UNAVAILABLE for the service "fail", slowly for "slow".
type health struct {
	healthpb.UnimplementedHealthServer
	slowFor time.Duration
}

func (h health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case "fail":
		return nil, status.Error(codes.Unavailable, "failing as asked")
	case "slow":
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(h.slowFor):
		}
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// liveTraffic keeps calls going between the demo's bookinfo workloads
// until ctx ends, so the UI and `meshrelay top` show live edges:
// productpage → reviews in east (a few failures), reviews → ratings in
// west.
func liveTraffic(ctx context.Context, addrs map[string]string) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, c := range []Calls{
		{Agent: addrs["east"], Namespace: "bookinfo", Client: "productpage-v1", Server: "reviews-v1", Service: "reviews.bookinfo.svc.cluster.local",
			Calls: 1 << 30, Failures: 0, Every: 100 * time.Millisecond, Export: 2 * time.Second},
		{Agent: addrs["west"], Namespace: "bookinfo", Client: "reviews-v2", Server: "ratings-v1", Service: "ratings.bookinfo.svc.cluster.local",
			Calls: 1 << 30, Every: 200 * time.Millisecond, Export: 2 * time.Second},
	} {
		g.Go(func() error {
			if err := CallsThrough(ctx, c); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("demo traffic: %w", err)
			}
			return nil
		})
	}
	return g.Wait()
}
