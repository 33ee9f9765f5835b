package snapshot

import (
	"fmt"
	"slices"
	"strings"
)

// MaxKinds bounds how many kinds a plugin may declare for its outputs, and
// how many an agent takes for one backend.
const MaxKinds = 256

// GroupKind is a kind without its version, as a plugin declares the kinds
// it emits: "group/Kind", "/Kind" for the core group. The cluster that
// applies an output resolves it to a version it serves.
type GroupKind struct {
	Group, Kind string
}

// String returns "group/Kind".
func (gk GroupKind) String() string { return gk.Group + "/" + gk.Kind }

// ParseGroupKind parses "group/Kind". The group is empty or a DNS
// subdomain; the kind starts with a letter and holds letters and digits.
func ParseGroupKind(s string) (GroupKind, error) {
	group, kind, ok := strings.Cut(s, "/")
	if !ok {
		return GroupKind{}, fmt.Errorf("kind %q: want group/Kind (/Kind for the core group)", s)
	}
	if err := checkGroup(group); err != nil {
		return GroupKind{}, fmt.Errorf("kind %q: %w", s, err)
	}
	if err := checkKind(kind); err != nil {
		return GroupKind{}, fmt.Errorf("kind %q: %w", s, err)
	}
	return GroupKind{Group: group, Kind: kind}, nil
}

// ParseGroupKinds parses a declared list of kinds: at most MaxKinds, each
// as ParseGroupKind wants. It returns them sorted, without duplicates.
func ParseGroupKinds(kinds []string) ([]GroupKind, error) {
	if len(kinds) > MaxKinds {
		return nil, fmt.Errorf("%d kinds, more than %d", len(kinds), MaxKinds)
	}
	out := make([]GroupKind, 0, len(kinds))
	for _, s := range kinds {
		gk, err := ParseGroupKind(s)
		if err != nil {
			return nil, err
		}
		out = append(out, gk)
	}
	slices.SortFunc(out, func(a, b GroupKind) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out), nil
}

func checkGroup(g string) error {
	if len(g) > 253 {
		return fmt.Errorf("group longer than 253 characters")
	}
	for _, label := range strings.Split(g, ".") {
		if g == "" {
			break
		}
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("group %q is not a DNS subdomain", g)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("group %q is not a DNS subdomain", g)
			}
		}
	}
	return nil
}

func checkKind(k string) error {
	if k == "" || len(k) > 63 {
		return fmt.Errorf("the kind must have 1 to 63 characters")
	}
	for i, c := range k {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return fmt.Errorf("the kind %q must start with a letter and hold letters and digits", k)
		}
	}
	return nil
}
