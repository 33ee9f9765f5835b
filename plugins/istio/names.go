package istio

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
)

// maxNameLength is the longest object name emitted: a DNS-1123 label.
const maxNameLength = 63

// objectName joins parts with "-" into a DNS-1123 label. Characters that a
// label cannot hold become "-"; a name longer than 63 characters is cut and
// ends with a hash of the whole, so distinct inputs keep distinct names.
func objectName(parts ...string) string {
	full := dnsLabel(strings.Join(parts, "-"))
	if len(full) <= maxNameLength {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	suffix := hex.EncodeToString(sum[:])[:8]
	head := strings.TrimRight(full[:maxNameLength-len(suffix)-1], "-")
	return head + "-" + suffix
}

// dnsLabel lowercases s and replaces every character other than [a-z0-9-]
// with "-", trimming dashes at both ends.
func dnsLabel(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}

// subsetName names the subset of the given labels after their values,
// sorted by key: {version: v1} is "v1", as in Istio's own samples.
func subsetName(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	values := make([]string, 0, len(keys))
	for _, k := range keys {
		values = append(values, labels[k])
	}
	if name := objectName(values...); name != "" {
		return name
	}
	return objectName(keys...)
}

// labelsKey is a stable string form of a label set, for maps and sorting.
func labelsKey(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
		b.WriteByte(',')
	}
	return b.String()
}
