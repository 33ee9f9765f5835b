package demo

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// trustActive reports whether every MeshTrust is in its Active phase and
// every cluster it selects completed it.
func trustActive(st *relayv1.Status) bool {
	for _, m := range st.GetTrust() {
		if m.GetPhase() != "Active" || len(m.GetClusters()) == 0 {
			return false
		}
		for _, c := range m.GetClusters() {
			if c.GetPhase() != "Active" {
				return false
			}
		}
	}
	return true
}

// printTrust shows the shared root: each mesh's root fingerprint and
// intermediate expiry.
func printTrust(w io.Writer, st *relayv1.Status) {
	for _, m := range st.GetTrust() {
		root := "-"
		if len(m.GetRoots()) > 0 {
			root = m.GetRoots()[0]
		}
		fmt.Fprintf(w, "\nMesh trust %s/%s (%s), root sha256 %s:\n", m.GetNamespace(), m.GetName(), m.GetPhase(), root)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tPHASE\tROOT\tINTERMEDIATE EXPIRES\tBOUNCED")
		for _, c := range m.GetClusters() {
			expires := "-"
			if c.GetIntermediateNotAfter() != nil {
				expires = c.GetIntermediateNotAfter().AsTime().UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.16s\t%s\t%d\n", c.GetCluster(), c.GetPhase(), c.GetIssuerRoot(), expires, c.GetBounced())
		}
		tw.Flush()
	}
}
