package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// TrustDomain is the SPIFFE trust domain of every meshrelay identity.
const TrustDomain = "meshrelay"

// clusterPathPrefix is the path of a cluster identity before its name.
const clusterPathPrefix = "/cluster/"

// maxClusterNameLen is the longest DNS-1123 label.
const maxClusterNameLen = 63

// ErrInvalidClusterName reports a cluster name that is not a DNS-1123 label.
var ErrInvalidClusterName = errors.New("invalid cluster name")

// ErrInvalidIdentity reports a certificate that does not carry exactly one
// well-formed cluster identity.
var ErrInvalidIdentity = errors.New("invalid cluster identity")

// ValidateClusterName returns an error wrapping [ErrInvalidClusterName] unless
// name is a DNS-1123 label: 1 to 63 lowercase letters, digits or '-', starting
// and ending with a letter or digit.
func ValidateClusterName(name string) error {
	if name == "" {
		return fmt.Errorf("cluster name is empty: %w", ErrInvalidClusterName)
	}
	if len(name) > maxClusterNameLen {
		return fmt.Errorf("cluster name %.70q is longer than %d characters: %w", name, maxClusterNameLen, ErrInvalidClusterName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(name)-1:
		default:
			return fmt.Errorf("cluster name %q: must consist of lowercase letters, digits and '-', and start and end with a letter or digit: %w", name, ErrInvalidClusterName)
		}
	}
	return nil
}

// ClusterURI returns the identity URI of cluster name,
// spiffe://meshrelay/cluster/NAME. It does not validate name.
func ClusterURI(name string) string {
	return "spiffe://" + TrustDomain + clusterPathPrefix + name
}

// ClusterFromCert returns the cluster name carried by cert's URI SAN. It
// returns an error wrapping [ErrInvalidIdentity] when cert has no URI SAN,
// more than one, or one that is not exactly spiffe://meshrelay/cluster/NAME
// with a valid NAME. It does not verify the certificate's chain or validity;
// callers use it on certificates a TLS handshake has verified.
func ClusterFromCert(cert *x509.Certificate) (string, error) {
	if cert == nil {
		return "", fmt.Errorf("no certificate: %w", ErrInvalidIdentity)
	}
	switch len(cert.URIs) {
	case 0:
		return "", fmt.Errorf("certificate %s has no URI SAN: %w", Serial(cert), ErrInvalidIdentity)
	case 1:
	default:
		return "", fmt.Errorf("certificate %s has %d URI SANs, want 1: %w", Serial(cert), len(cert.URIs), ErrInvalidIdentity)
	}
	name, err := clusterFromURI(cert.URIs[0])
	if err != nil {
		return "", fmt.Errorf("certificate %s: %w", Serial(cert), err)
	}
	return name, nil
}

// clusterFromURI returns the cluster name of u, which must be exactly the
// canonical form ClusterURI returns.
func clusterFromURI(u *url.URL) (string, error) {
	if u == nil {
		return "", fmt.Errorf("empty URI SAN: %w", ErrInvalidIdentity)
	}
	if u.Scheme != "spiffe" || u.Host != TrustDomain || u.User != nil || u.Opaque != "" ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "" ||
		!strings.HasPrefix(u.Path, clusterPathPrefix) {
		return "", fmt.Errorf("URI SAN %.200q is not %s: %w", u.String(), ClusterURI("NAME"), ErrInvalidIdentity)
	}
	name := strings.TrimPrefix(u.Path, clusterPathPrefix)
	if err := ValidateClusterName(name); err != nil {
		return "", fmt.Errorf("URI SAN %.200q: %w: %w", u.String(), ErrInvalidIdentity, err)
	}
	if u.String() != ClusterURI(name) {
		return "", fmt.Errorf("URI SAN %.200q is not in canonical form: %w", u.String(), ErrInvalidIdentity)
	}
	return name, nil
}

// Serial returns cert's serial number as lowercase hexadecimal, the form
// [CA.SignClusterCSR] returns and the VerifyCluster hook of
// [ServerTLSOptions] receives.
func Serial(cert *x509.Certificate) string {
	if cert == nil || cert.SerialNumber == nil {
		return ""
	}
	return cert.SerialNumber.Text(16)
}
