package trust

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/core/pki"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// Client is the server's Trust service as the manager uses it.
type Client interface {
	Report(ctx context.Context, r *relayv1.TrustReport) (*relayv1.TrustPlan, error)
	Sign(ctx context.Context, r *relayv1.TrustSignRequest) (*relayv1.TrustSignResponse, error)
}

// Options configure a Manager.
type Options struct {
	// Cluster is the cluster's registered name.
	Cluster string
	// Interval is how often the manager reports and reconciles.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Manager keeps one cluster's cacerts Secret as the server's plan says.
type Manager struct {
	opts    Options
	client  Client
	secrets Secrets
	bounce  *bouncer // nil without a cluster to bounce in
	log     *slog.Logger

	mu      sync.Mutex
	plan    *relayv1.TrustPlan
	desired *material // what the manager last wrote; the key lives only here and in the Secret
	lastErr error
}

// New returns a manager writing through secrets. kube, when not nil, is
// the cluster whose workloads are bounced.
func New(opts Options, client Client, secrets Secrets, kube kubernetes.Interface, logger *slog.Logger) *Manager {
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{opts: opts, client: client, secrets: secrets, log: logger.With("part", "trust")}
	if kube != nil {
		m.bounce = &bouncer{kube: kube, now: opts.Now}
	}
	return m
}

// Run steps every Interval until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.opts.Interval)
	defer t.Stop()
	for {
		if err := m.Step(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("mesh trust", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Step reports the Secret, gets the plan, and brings the Secret and the
// workloads to it. When the server cannot be reached it only corrects
// drift from what it last wrote.
func (m *Manager) Step(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, err := m.current(ctx)
	if err != nil {
		return m.fail(err)
	}
	plan, err := m.client.Report(ctx, m.report(cur))
	if err != nil {
		if derr := m.correctDrift(ctx, cur); derr != nil {
			return m.fail(errors.Join(fmt.Errorf("report: %w", err), derr))
		}
		return fmt.Errorf("report mesh trust (the Secret stays as it is): %w", err)
	}
	if plan.GetPolicy() == "" || len(plan.GetTrustBundle()) == 0 {
		return nil // no MeshTrust selects the cluster (any more): leave the Secret alone
	}
	if m.plan == nil || m.plan.GetNamespace() != plan.GetNamespace() {
		m.plan = plan
		if cur, err = m.secrets.Get(ctx, plan.GetNamespace()); err != nil {
			return m.fail(err)
		}
	}
	m.plan = plan
	want, err := m.want(ctx, plan, cur)
	if err != nil {
		return m.fail(err)
	}
	if err := m.write(ctx, want, cur); err != nil {
		return m.fail(err)
	}
	m.lastErr = nil
	if m.bounce != nil {
		secret, err := m.secrets.Get(ctx, plan.GetNamespace())
		if err != nil {
			return m.fail(err)
		}
		if err := m.bounce.step(ctx, plan, secret); err != nil {
			return m.fail(fmt.Errorf("bounce: %w", err))
		}
	}
	return nil
}

func (m *Manager) fail(err error) error {
	m.lastErr = err
	return err
}

// current reads the Secret of the namespace of the last plan.
func (m *Manager) current(ctx context.Context) (*corev1.Secret, error) {
	if m.plan == nil {
		return nil, nil
	}
	return m.secrets.Get(ctx, m.plan.GetNamespace())
}

// report describes the Secret: certificates and fingerprints, never the key.
func (m *Manager) report(cur *corev1.Secret) *relayv1.TrustReport {
	r := &relayv1.TrustReport{Policy: m.plan.GetPolicy()}
	if cur != nil {
		r.CaCert = cur.Data[KeyCACert]
		r.Roots = rootFingerprints(cur.Data[KeyRootCert])
	}
	if m.bounce != nil {
		r.Bounced, r.Pending = m.bounce.progress()
	}
	if m.lastErr != nil {
		r.Error = truncate(m.lastErr.Error(), 1000)
	}
	return r
}

// want returns the Secret's content under plan: the intermediate it has
// when the signing root signed it and it is not due for renewal, else a
// new one; the plan's roots in any case.
func (m *Manager) want(ctx context.Context, plan *relayv1.TrustPlan, cur *corev1.Secret) (*material, error) {
	base := m.desired
	if base == nil && cur != nil && cur.Labels[LabelManaged] == meta.ManagedByValue {
		base = fromSecret(cur) // after a restart: adopt what this agent wrote before
	}
	if base != nil && !m.due(plan, base) {
		next := &material{key: base.key, caCert: base.caCert, chain: base.chain, roots: plan.GetTrustBundle()}
		if err := next.check(); err == nil {
			return next, nil
		}
	}
	return m.issue(ctx, plan)
}

// due reports whether an intermediate must be replaced.
func (m *Manager) due(plan *relayv1.TrustPlan, base *material) bool {
	inter, err := base.intermediate()
	if err != nil || base.signer() != plan.GetSigningRoot() {
		return true
	}
	renewAt := inter.NotAfter.Add(-time.Duration(plan.GetRenewBeforeSeconds()) * time.Second)
	return !m.opts.Now().Before(renewAt)
}

// issue makes a key in the cluster and has the server sign its CSR.
func (m *Manager) issue(ctx context.Context, plan *relayv1.TrustPlan) (*material, error) {
	key, err := pki.NewKey()
	if err != nil {
		return nil, err
	}
	csr, err := pki.NewCSR(key, m.opts.Cluster)
	if err != nil {
		return nil, err
	}
	resp, err := m.client.Sign(ctx, &relayv1.TrustSignRequest{Policy: plan.GetPolicy(), Csr: csr})
	if err != nil {
		return nil, fmt.Errorf("sign the intermediate: %w", err)
	}
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	next := &material{key: keyPEM, caCert: resp.GetCaCert(), chain: resp.GetCertChain(), roots: plan.GetTrustBundle()}
	if err := next.check(); err != nil {
		return nil, fmt.Errorf("the server's intermediate: %w", err)
	}
	m.log.Info("new mesh intermediate", "expires", resp.GetNotAfter().AsTime(), "policy", plan.GetPolicy())
	return next, nil
}

// write puts want into the Secret when it holds something else.
func (m *Manager) write(ctx context.Context, want *material, cur *corev1.Secret) error {
	m.desired = want
	if want.equal(cur) && cur.Labels[LabelManaged] == meta.ManagedByValue && cur.Annotations[AnnChain] == want.chainID() {
		return nil
	}
	s := secretFor(m.plan.GetNamespace(), m.plan.GetPolicy(), want, cur, m.opts.Now())
	if err := m.secrets.Put(ctx, s); err != nil {
		return fmt.Errorf("write Secret %s/%s: %w", s.Namespace, SecretName, err)
	}
	m.log.Info("wrote the mesh CA Secret", "namespace", s.Namespace, "chain", want.chainID(), "roots", len(rootFingerprints(want.roots)))
	return nil
}

// correctDrift restores what the manager last wrote, without the server.
func (m *Manager) correctDrift(ctx context.Context, cur *corev1.Secret) error {
	if m.desired == nil || m.plan == nil {
		return nil
	}
	return m.write(ctx, m.desired, cur)
}

// Plan returns the last plan the server sent, for status and tests.
func (m *Manager) Plan() *relayv1.TrustPlan {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.plan
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
