package trust

import (
	"context"
	"errors"
	"fmt"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/core/pki"
)

// SecretReader reads a Secret of the management cluster, for a MeshTrust
// root kept in one. The server's Kubernetes policy source is one.
type SecretReader interface {
	ReadSecret(ctx context.Context, namespace, name string) (map[string][]byte, error)
}

// maxRootSecretBytes bounds what is read of a root's Secret.
const maxRootSecretBytes = 256 << 10

// sourceCA loads a MeshTrust's root from its files or Secret; nil for a
// generated root.
func (t *Manager) sourceCA(ctx context.Context, p *policyv1alpha1.MeshTrust) (*pki.CA, error) {
	switch root := p.Spec.Root; {
	case root.Files != nil:
		return pki.LoadCA(root.Files.CertFile, root.Files.KeyFile, root.Files.ChainFile)
	case root.Secret != nil:
		if t.deps.Secrets == nil {
			return nil, errors.New("a root in a Secret needs --config-source kube")
		}
		data, err := t.deps.Secrets.ReadSecret(ctx, root.Secret.Namespace, root.Secret.Name)
		if err != nil {
			return nil, fmt.Errorf("read Secret %s/%s: %w", root.Secret.Namespace, root.Secret.Name, err)
		}
		return caFromSecret(data, root.Secret)
	}
	return nil, nil
}

// caFromSecret parses a CA from a Secret's tls.crt or ca.crt, tls.key or
// ca.key, and optional ca-chain.crt.
func caFromSecret(data map[string][]byte, ref *policyv1alpha1.RootSecret) (*pki.CA, error) {
	size := 0
	for _, v := range data {
		size += len(v)
	}
	if size > maxRootSecretBytes {
		return nil, fmt.Errorf("Secret %s/%s holds %d bytes, more than %d", ref.Namespace, ref.Name, size, maxRootSecretBytes)
	}
	cert, key := firstOf(data, "tls.crt", "ca.crt"), firstOf(data, "tls.key", "ca.key")
	if cert == nil || key == nil {
		return nil, fmt.Errorf("Secret %s/%s needs tls.crt and tls.key (or ca.crt and ca.key)", ref.Namespace, ref.Name)
	}
	pemData := append(append(append([]byte{}, key...), cert...), data["ca-chain.crt"]...)
	ca, err := pki.ParsePEM(pemData)
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return ca, nil
}

// firstOf returns the first of keys that data holds, not empty.
func firstOf(data map[string][]byte, keys ...string) []byte {
	for _, k := range keys {
		if v, ok := data[k]; ok && len(v) > 0 {
			return v
		}
	}
	return nil
}
