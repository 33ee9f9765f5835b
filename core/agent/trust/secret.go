package trust

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/core/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// Names in and on Istio's plug-in CA Secret.
const (
	SecretName    = "cacerts"
	KeyCACert     = "ca-cert.pem"
	KeyCAKey      = "ca-key.pem"
	KeyRootCert   = "root-cert.pem"
	KeyCertChain  = "cert-chain.pem"
	LabelManaged  = meta.ManagedByLabel
	AnnChain      = "meshrelay.io/mesh-trust-chain"
	AnnChainSince = "meshrelay.io/mesh-trust-chain-since"
	AnnPolicy     = "meshrelay.io/mesh-trust"
)

// Secrets reads and writes the cacerts Secret. Get returns nil, nil when
// there is none.
type Secrets interface {
	Get(ctx context.Context, namespace string) (*corev1.Secret, error)
	Put(ctx context.Context, s *corev1.Secret) error
}

// KubeSecrets keeps the Secret in the cluster.
type KubeSecrets struct{ Client kubernetes.Interface }

// Get implements Secrets.
func (k KubeSecrets) Get(ctx context.Context, namespace string) (*corev1.Secret, error) {
	s, err := k.Client.CoreV1().Secrets(namespace).Get(ctx, SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return s, err
}

// Put implements Secrets: it updates the Secret, or creates it.
func (k KubeSecrets) Put(ctx context.Context, s *corev1.Secret) error {
	api := k.Client.CoreV1().Secrets(s.Namespace)
	if s.ResourceVersion != "" {
		_, err := api.Update(ctx, s, metav1.UpdateOptions{FieldManager: "meshrelay-agent"})
		return err
	}
	_, err := api.Create(ctx, s, metav1.CreateOptions{FieldManager: "meshrelay-agent"})
	return err
}

// DirSecrets keeps the Secret as YAML under a directory, for agents whose
// cluster is a directory: DIR/NAMESPACE/cacerts.yaml, mode 0600.
type DirSecrets struct{ Dir string }

func (d DirSecrets) path(ns string) string { return filepath.Join(d.Dir, ns, SecretName+".yaml") }

// Get implements Secrets.
func (d DirSecrets) Get(_ context.Context, namespace string) (*corev1.Secret, error) {
	data, err := os.ReadFile(d.path(namespace))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s corev1.Secret
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", d.path(namespace), err)
	}
	s.ResourceVersion = "dir"
	return &s, nil
}

// Put implements Secrets.
func (d DirSecrets) Put(_ context.Context, s *corev1.Secret) error {
	c := s.DeepCopy()
	c.ResourceVersion = ""
	c.APIVersion, c.Kind = "v1", "Secret"
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(d.path(s.Namespace)), 0o700); err != nil {
		return err
	}
	tmp := d.path(s.Namespace) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, d.path(s.Namespace))
}

// material is the content of the Secret.
type material struct {
	key, caCert, chain, roots []byte
}

func (m *material) data() map[string][]byte {
	return map[string][]byte{KeyCAKey: m.key, KeyCACert: m.caCert, KeyCertChain: m.chain, KeyRootCert: m.roots}
}

func fromSecret(s *corev1.Secret) *material {
	if s == nil {
		return nil
	}
	m := &material{key: s.Data[KeyCAKey], caCert: s.Data[KeyCACert], chain: s.Data[KeyCertChain], roots: s.Data[KeyRootCert]}
	if m.check() != nil {
		return nil
	}
	return m
}

// equal reports whether the Secret holds m.
func (m *material) equal(s *corev1.Secret) bool {
	if s == nil {
		return false
	}
	for k, v := range m.data() {
		if !bytes.Equal(s.Data[k], v) {
			return false
		}
	}
	return len(s.Data) == 4
}

// intermediate returns the parsed ca-cert.
func (m *material) intermediate() (*x509.Certificate, error) {
	certs, err := pki.ParseCertificatesPEM(m.caCert)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyCACert, err)
	}
	return certs[0], nil
}

// check verifies that the key matches the intermediate and that the
// intermediate verifies up to one of the roots through cert-chain.pem.
func (m *material) check() error {
	if _, err := tls.X509KeyPair(m.caCert, m.key); err != nil {
		return fmt.Errorf("%s does not match %s: %w", KeyCAKey, KeyCACert, err)
	}
	inter, err := m.intermediate()
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(m.roots) {
		return fmt.Errorf("%s holds no certificate", KeyRootCert)
	}
	mids := x509.NewCertPool()
	mids.AppendCertsFromPEM(m.chain)
	if _, err := inter.Verify(x509.VerifyOptions{Roots: roots, Intermediates: mids, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("%s does not verify up to %s: %w", KeyCACert, KeyRootCert, err)
	}
	return nil
}

// signer returns the fingerprint of the certificate that signed the
// intermediate: the second certificate of cert-chain.pem.
func (m *material) signer() string {
	certs, err := pki.ParseCertificatesPEM(m.chain)
	if err != nil || len(certs) < 2 {
		return ""
	}
	return pki.Fingerprint(certs[1])
}

// chainID is the fingerprint of the intermediate and roots together: what
// workloads' certificates depend on.
func (m *material) chainID() string {
	sum := sha256.Sum256(append(append([]byte{}, m.caCert...), m.roots...))
	return hex.EncodeToString(sum[:8])
}

// rootFingerprints returns the fingerprints of root-cert.pem's certificates.
func rootFingerprints(rootsPEM []byte) []string {
	certs, err := pki.ParseCertificatesPEM(rootsPEM)
	if err != nil {
		return nil
	}
	out := make([]string, len(certs))
	for i, c := range certs {
		out[i] = pki.Fingerprint(c)
	}
	return out
}

// secretFor builds the Secret holding m, keeping the time the chain last
// changed from prev when the chain is the same.
func secretFor(namespace, policy string, m *material, prev *corev1.Secret, now time.Time) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: namespace, Labels: map[string]string{}, Annotations: map[string]string{}},
		Type:       corev1.SecretTypeOpaque,
		Data:       m.data(),
	}
	since := now.UTC().Format(time.RFC3339)
	if prev != nil {
		s.ObjectMeta = *prev.ObjectMeta.DeepCopy()
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		if prev.Annotations[AnnChain] == m.chainID() && prev.Annotations[AnnChainSince] != "" {
			since = prev.Annotations[AnnChainSince]
		}
	}
	s.Labels[LabelManaged] = meta.ManagedByValue
	s.Annotations[AnnPolicy] = policy
	s.Annotations[AnnChain] = m.chainID()
	s.Annotations[AnnChainSince] = since
	return s
}
