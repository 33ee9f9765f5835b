package cilium

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
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
	sum := sha256.Sum256([]byte(ref.String()))
	hash := hex.EncodeToString(sum[:4])
	readable := prefix + "-" + ref.Namespace + "-" + ref.Name
	if max := maxNameLength - len(hash) - 1; len(readable) > max {
		readable = readable[:max]
	}
	readable = strings.TrimRight(strings.ToLower(readable), "-.")
	return readable + "-" + hash
}
