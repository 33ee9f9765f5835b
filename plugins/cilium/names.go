package cilium

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
)

// maxNameLength is the longest name the translator gives an object, so
// that names also fit in label values.
const maxNameLength = 63

// objectName returns the stable name of the object derived from policy p:
// a readable prefix from kind, namespace and name, then a short hash of the
// policy's full reference, so that policies whose readable parts join to
// the same string (or are cut to the same prefix) still get distinct names.
func objectName(prefix string, p policyv1alpha1.Policy) string {
	ref := sdk.RefOf(p)
	return hashedName(prefix+"-"+ref.Namespace+"-"+ref.Name, ref.String())
}

// serviceObjectName returns the stable name of the object derived from a
// Service, in the Service's namespace: the prefix and the Service's name,
// then a short hash of both.
func serviceObjectName(prefix string, svc *corev1.Service) string {
	return hashedName(prefix+"-"+svc.Name, prefix+"/"+svc.Namespace+"/"+svc.Name)
}

// hashedName cuts readable to fit maxNameLength with a short hash of key.
func hashedName(readable, key string) string {
	sum := sha256.Sum256([]byte(key))
	hash := hex.EncodeToString(sum[:4])
	if max := maxNameLength - len(hash) - 1; len(readable) > max {
		readable = readable[:max]
	}
	readable = strings.TrimRight(strings.ToLower(readable), "-.")
	return readable + "-" + hash
}
