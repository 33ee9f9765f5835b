package main

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent/sink"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/internal/offline"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

func newTranslateCommand(logs *logOptions) *cobra.Command {
	var clustersDir, policiesDir, pluginDir, outDir string
	cmd := &cobra.Command{
		Use:   "translate",
		Short: "Translate clusters and policies from files, offline",
		Long: `Translate once, with no server and no agents: every subdirectory of
--clusters is a cluster (YAML manifests, as an agent with --source dir:PATH
would discover them), --policies holds policies, --plugin-dir the installed
plugins. Outputs are printed as YAML, or written under --out one file per
resource in OUT/<cluster>/<backend>/, named as the agent's --sink dir:PATH
names them. Diagnostics go to stderr; the exit code is 1 when a resource
cannot be written, and 3 when a policy has an error diagnostic or a plugin
failed.`,
		Example: `  meshrelay translate --clusters testdata/demo/clusters --policies testdata/policies \
    --plugin-dir ./plugins --out ./rendered`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			host, err := pluginhost.New(pluginDir, logger, pluginhost.DefaultOptions())
			if err != nil {
				return err
			}
			defer host.Close()
			if err := host.Start(cmd.Context()); err != nil {
				return err
			}
			var ts []pluginhost.Translator
			for _, p := range host.Plugins() {
				ts = append(ts, p)
			}
			res, err := offline.Translate(cmd.Context(), offline.Options{ClustersDir: clustersDir, PoliciesDir: policiesDir, Translators: ts, Logger: logger})
			if err != nil {
				return err
			}
			var unwritten []error
			for _, k := range res.Keys() {
				snap := res.Outputs[k]
				if outDir != "" {
					errs, err := sink.NewDir(filepath.Join(outDir, k.Cluster)).Apply(cmd.Context(), k.Backend, snap, true)
					if err != nil {
						return fmt.Errorf("cluster %s: %w", k.Cluster, err)
					}
					for _, id := range slices.SortedFunc(maps.Keys(errs), snapshot.ID.Compare) {
						unwritten = append(unwritten, fmt.Errorf("cluster %s, backend %s: %w", k.Cluster, k.Backend, errs[id]))
					}
					continue
				}
				for r := range snap.All() {
					y, err := yaml.JSONToYAML(r.Body)
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "# cluster: %s, backend: %s\n%s---\n", k.Cluster, k.Backend, y)
				}
			}
			if outDir != "" && len(unwritten) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d outputs under %s\n", len(res.Outputs), outDir)
			}
			failed := false
			for _, d := range res.Diagnostics {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s %s/%s: %s%s (%s)\n", d.Severity, d.Policy.Kind, d.Policy.Namespace, d.Policy.Name, pathPrefix(d.Path), d.Summary, d.Plugin)
				failed = failed || d.Severity.IsError()
			}
			for _, p := range res.Failed {
				fmt.Fprintf(cmd.ErrOrStderr(), "plugin %s failed: %s\n", p.Name, p.Error)
				failed = true
			}
			if len(unwritten) > 0 {
				return fmt.Errorf("some resources were not written under %s:\n%w", outDir, errors.Join(unwritten...))
			}
			if failed {
				return problem("translation reported errors")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&clustersDir, "clusters", "", "directory with one subdirectory of YAML per cluster; its labels.yaml, if any, maps cluster names to their registry labels")
	fs.StringVar(&policiesDir, "policies", "", "directory of policies")
	fs.StringVar(&pluginDir, "plugin-dir", "plugins", "directory of installed plugins")
	fs.StringVar(&outDir, "out", "", "write outputs under this directory instead of printing them")
	_ = cmd.MarkFlagRequired("clusters")
	return cmd
}

func pathPrefix(p string) string {
	if p == "" {
		return ""
	}
	return p + ": "
}
