package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TrustClient calls the server's Trust service with the agent's
// credentials: its client certificate under mTLS, the cluster and token
// headers otherwise. Each call dials anew, so a renewed certificate or
// another server address is picked up.
type TrustClient struct{ a *Agent }

// TrustClient returns the agent's client of the Trust service.
func (a *Agent) TrustClient() *TrustClient { return &TrustClient{a: a} }

// trustCallTimeout bounds one Trust call.
const trustCallTimeout = 30 * time.Second

// call dials and runs fn with the stream headers the server authenticates.
func (c *TrustClient) call(ctx context.Context, fn func(context.Context, relayv1.TrustClient) error) error {
	a := c.a
	conn, err := a.dial(a.opts.Mode == pki.ModeMTLS)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, trustCallTimeout)
	defer cancel()
	md := []string{"x-meshrelay-cluster", a.opts.Cluster}
	if a.opts.Mode == pki.ModeTLS || a.opts.Insecure {
		tok, err := a.token()
		if err != nil {
			return err
		}
		md = append(md, "x-meshrelay-token", tok)
	}
	return fn(metadata.AppendToOutgoingContext(ctx, md...), relayv1.NewTrustClient(conn))
}

// Report sends the cluster's trust report and returns the plan.
func (c *TrustClient) Report(ctx context.Context, r *relayv1.TrustReport) (plan *relayv1.TrustPlan, err error) {
	err = c.call(ctx, func(ctx context.Context, tc relayv1.TrustClient) error {
		plan, err = tc.Report(ctx, r, grpc.WaitForReady(false))
		return err
	})
	return plan, err
}

// Sign asks the server to sign the intermediate's CSR.
func (c *TrustClient) Sign(ctx context.Context, r *relayv1.TrustSignRequest) (resp *relayv1.TrustSignResponse, err error) {
	err = c.call(ctx, func(ctx context.Context, tc relayv1.TrustClient) error {
		resp, err = tc.Sign(ctx, r)
		return err
	})
	return resp, err
}
