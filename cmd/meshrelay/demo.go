package main

import (
	"github.com/meshrelay/meshrelay/internal/demo"
	"github.com/spf13/cobra"
)

func newDemoCommand(_ *logOptions) *cobra.Command {
	opts := demo.Options{Out: "demo-output", StagedRollout: true}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run meshrelay end to end on this machine, with nothing installed",
		Long: `Run a whole fleet on this machine: a management server on the memory store
with real generated TLS, the Istio, Envoy, Cilium and Gateway API plugins
installed with their checksums and run as real plugin processes, and four
agents whose clusters are directories of YAML (a multi-cluster bookinfo:
Istio in east and west, Cilium in central, Linkerd in north, a standalone
Envoy group in west). Policies come from testdata/policies.

It prints what was translated for which cluster and backend and each
policy's status, edits one policy and shows the change propagate, then
(--staged-rollout) labels the clusters by ring and makes a second edit as
a staged rollout, writes every output under --out, and exits — or keeps
running with --serve. The
web UI (--ui-addr, a free loopback port by default) shows the fleet live;
the demo prints its URL and where the admin token to log in with is.
Run it from the meshrelay source tree; it builds the plugins when their
binaries are not next to it.`,
		Example: `  meshrelay demo
  meshrelay demo --out /tmp/demo --serve
  meshrelay demo --serve --ui-addr 127.0.0.1:9080
  meshrelay demo --plugins oci://`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Stdout = cmd.OutOrStdout()
			if opts.PluginDir == demo.LocalRegistry {
				opts.PluginDir, opts.ThroughRegistry = "", true
			}
			_, err := demo.Run(cmd.Context(), opts)
			return err
		},
	}
	cmd.Flags().StringVar(&opts.Out, "out", opts.Out, "folder for outputs, logs and state (replaced on each run)")
	cmd.Flags().StringVar(&opts.PluginDir, "plugins", "", "folder with meshrelay-plugin-* binaries (default: next to this binary, or built); \"oci://\" publishes them, signed, to an OCI registry the demo starts on loopback and installs them from it")
	cmd.Flags().BoolVar(&opts.Serve, "serve", false, "keep the fleet running until interrupted")
	cmd.Flags().BoolVar(&opts.StagedRollout, "staged-rollout", opts.StagedRollout, "make a second policy edit as a staged rollout (canary east, the rest once approved); the RolloutStrategy is removed once it completed")
	cmd.Flags().StringVar(&opts.UIAddr, "ui-addr", "", "address of the web UI (default: a free loopback port)")
	cmd.Flags().StringVar(&opts.Root, "root", "", "the meshrelay source tree (default: found from the working directory)")
	return cmd
}
