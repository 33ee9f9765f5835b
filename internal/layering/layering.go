package layering

import (
	"fmt"
	"slices"
	"strings"
)

// layers ranks the module's packages by path prefix, lowest first; the
// longest matching prefix counts.
var layers = map[string]int{
	"proto/":               0,
	"api/":                 1,
	"deploy":               1,
	"sdk":                  2,
	"internal/testenv":     2,
	"internal/testutil":    2,
	"internal/tcpproxy":    2,
	"core/":                3,
	"plugins/":             3,
	"examples/":            3,
	"internal/demo":        4,
	"internal/offline":     4,
	"internal/bench":       4,
	"internal/adminclient": 4,
	"cmd/":                 5,
	"internal/layering":    5,
}

// coreLayers ranks the packages inside core, lowest first.
var coreLayers = map[string]int{
	"core/store":      0,
	"core/pki":        0,
	"core/manifest":   0,
	"core/catalog":    0,
	"core/pluginhost": 0,
	"core/traffic":    0,
	"core/rollout":    0,
	"core/engine":     1,
	"core/preview":    2,
	"core/server":     3,
	"core/agent":      3,
	"core/ui":         4,
}

// apart lists prefixes whose packages never import each other's, in either
// direction, though they share a layer.
var apart = [][2]string{
	{"core/", "plugins/"},
	{"core/", "examples/"},
	{"core/agent", "core/server"},
}

// Edge is one import: From imports To, both paths relative to the module.
type Edge struct{ From, To string }

// Check returns why the import is not allowed, or nil.
func Check(e Edge) error {
	from, to := e.From, e.To
	rf, okf := rank(layers, from)
	rt, okt := rank(layers, to)
	switch {
	case !okf || !okt:
		return fmt.Errorf("%s imports %s: add both to a layer in internal/layering", from, to)
	case rt > rf:
		return fmt.Errorf("%s imports %s, a higher layer", from, to)
	case strings.HasPrefix(to, "cmd/"):
		return fmt.Errorf("%s imports %s: nothing imports cmd", from, to)
	case strings.HasPrefix(from, "api/") && !under(to, "api/", "proto/"):
		return fmt.Errorf("%s imports %s: api imports only api and proto", from, to)
	case under(from, "sdk", "plugins/") && strings.HasPrefix(to, "internal/"):
		return fmt.Errorf("%s imports %s: sdk and plugins import no internal package", from, to)
	}
	for _, p := range apart {
		if under(from, p[0]) && under(to, p[1]) || under(from, p[1]) && under(to, p[0]) {
			return fmt.Errorf("%s imports %s: %s and %s never import each other", from, to, p[0], p[1])
		}
	}
	if under(from, "core/") && under(to, "core/") {
		cf, okf := rank(coreLayers, from)
		ct, okt := rank(coreLayers, to)
		switch {
		case !okf || !okt:
			return fmt.Errorf("%s imports %s: add both to core's layers in internal/layering", from, to)
		case ct > cf:
			return fmt.Errorf("%s imports %s, a higher layer of core", from, to)
		}
	}
	return nil
}

// Violations checks every import of a graph (package → the packages it
// imports) and returns the broken rules, sorted.
func Violations(graph map[string][]string) []string {
	var out []string
	for from, tos := range graph {
		for _, to := range tos {
			if err := Check(Edge{from, to}); err != nil {
				out = append(out, err.Error())
			}
		}
	}
	slices.Sort(out)
	return out
}

// rank returns the rank of the longest prefix of path in ranks.
func rank(ranks map[string]int, path string) (int, bool) {
	best, r := "", 0
	for p, n := range ranks {
		if under(path, p) && len(p) > len(best) {
			best, r = p, n
		}
	}
	return r, best != ""
}

// under reports whether path is one of prefixes or below one of them.
func under(path string, prefixes ...string) bool {
	for _, p := range prefixes {
		q := strings.TrimSuffix(p, "/")
		if path == q || strings.HasPrefix(path, q+"/") {
			return true
		}
	}
	return false
}
