package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/manifest"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/preview"
	"github.com/meshrelay/meshrelay/internal/offline"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

// maxDiffResponse bounds the answer of a diff: every changed resource of
// the fleet, twice in YAML.
const maxDiffResponse = 256 << 20

func newDiffCommand(logs *logOptions) *cobra.Command {
	var (
		af                                   adminFlags
		files                                []string
		del                                  bool
		output, clustersDir, policiesDir, pd string
	)
	cmd := &cobra.Command{
		Use:   "diff -f FILE|DIR",
		Short: "Show what a policy change would do to the fleet, without changing anything",
		Long: `Translate the policies in -f (added or changed; with --delete, removed)
over the fleet's current inputs, with the installed plugins, and print per
cluster and backend the resources that would be created, changed (a
unified diff of their YAML) and deleted, and the diagnostics the change
would add or clear. Nothing changes: the server translates on scratch
sessions of its plugins, beside the ones it serves the fleet with, and it
covers every cluster, whichever replica serves it. MeshTrust policies are
left out: the server's trust manager, not the plugins, acts on them.

With --clusters (and --policies, --plugin-dir) the fleet is read from
directories instead, as meshrelay translate reads it, and the answer is the
same without a server: for CI.

Exit codes, as kubectl diff's: 0 when nothing would change, 1 when
something would, 2 or more on error.`,
		Example: `  meshrelay diff -f reviews-traffic.yaml
  meshrelay diff -f policies/ -o json
  meshrelay diff --delete -f reviews-access.yaml
  meshrelay diff --clusters clusters/ --policies policies/ --plugin-dir plugins/ -f new.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" && output != "yaml" {
				return &exitError{code: 2, err: fmt.Errorf("--output must be text, yaml or json, not %q", output)}
			}
			change, err := readChange(files, del)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			var rep *preview.Report
			if clustersDir != "" {
				rep, err = diffOffline(cmd.Context(), logs, cmd.ErrOrStderr(), clustersDir, policiesDir, pd, change)
			} else {
				rep, err = diffOnline(cmd.Context(), &af, change)
			}
			if err != nil {
				var ee *exitError
				if errors.As(err, &ee) {
					return err
				}
				return &exitError{code: 2, err: err}
			}
			if output == "text" {
				printDiff(cmd.OutOrStdout(), rep)
			} else if err := printData(cmd.OutOrStdout(), output, rep); err != nil {
				return &exitError{code: 2, err: err}
			}
			if !rep.Empty() {
				return &exitError{code: 1, err: errDiffers}
			}
			return nil
		},
	}
	af.add(cmd)
	fs := cmd.Flags()
	fs.StringArrayVarP(&files, "filename", "f", nil, "policies to add or change (a YAML or JSON file, or a directory of them); repeatable")
	fs.BoolVar(&del, "delete", false, "the policies in -f are removed instead")
	fs.StringVarP(&output, "output", "o", "text", "output format: text, yaml or json")
	fs.StringVar(&clustersDir, "clusters", "", "offline: directory with one subdirectory of YAML per cluster, instead of a server; its labels.yaml, if any, maps cluster names to their registry labels")
	fs.StringVar(&policiesDir, "policies", "", "offline: directory of the policies as they are")
	fs.StringVar(&pd, "plugin-dir", "plugins", "offline: directory of installed plugins")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// errDiffers ends a diff that found changes: exit 1, printed as nothing
// more than the diff itself.
var errDiffers = errors.New("the change would change the fleet")

// readChange reads the policies of -f.
func readChange(paths []string, del bool) (preview.Change, error) {
	var c preview.Change
	for _, p := range paths {
		rs, err := readResources(p)
		if err != nil {
			return c, err
		}
		if len(rs) == 0 {
			return c, fmt.Errorf("%s: no objects", p)
		}
		for _, r := range rs {
			if del {
				c.Deletes = append(c.Deletes, r.ID)
			} else {
				c.Upserts = append(c.Upserts, r)
			}
		}
	}
	return c, nil
}

// readResources reads the objects of a YAML or JSON file, or of a
// directory as the policy source reads one.
func readResources(path string) ([]snapshot.Resource, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		s, err := manifest.NewDir(path, manifest.Options{}).Snapshot()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return s.Resources(), nil
	}
	if fi.Size() > manifest.MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, manifest.MaxFileSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []snapshot.Resource
	for _, doc := range manifest.SplitDocuments(data) {
		objs, err := manifest.DecodeDocument(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, o := range objs {
			r, err := snapshot.FromObject(o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// diffOnline asks the server.
func diffOnline(ctx context.Context, af *adminFlags, change preview.Change) (*preview.Report, error) {
	c, ctx, done, err := af.client(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	req := &relayv1.DiffRequest{}
	for _, r := range change.Upserts {
		req.Upserts = append(req.Upserts, snapshot.ResourceToProto(r))
	}
	for _, id := range change.Deletes {
		req.Deletes = append(req.Deletes, snapshot.IDToProto(id))
	}
	resp, err := c.Diff(ctx, req, grpc.MaxCallRecvMsgSize(maxDiffResponse))
	if err != nil {
		return nil, apiError(err)
	}
	var rep preview.Report
	if err := json.Unmarshal(resp.GetReport(), &rep); err != nil {
		return nil, fmt.Errorf("decode the server's diff: %w", err)
	}
	return &rep, nil
}

// diffOffline previews the change over directories, with the plugins
// installed in pluginDir.
func diffOffline(ctx context.Context, logs *logOptions, stderr io.Writer, clustersDir, policiesDir, pluginDir string, change preview.Change) (*preview.Report, error) {
	logger, err := logs.logger(stderr)
	if err != nil {
		return nil, err
	}
	host, err := pluginhost.New(pluginDir, logger, pluginhost.DefaultOptions())
	if err != nil {
		return nil, err
	}
	defer host.Close()
	if err := host.Start(ctx); err != nil {
		return nil, err
	}
	var ts []pluginhost.Translator
	for _, p := range host.Plugins() {
		ts = append(ts, p)
	}
	if len(ts) == 0 {
		// Without a translator every change would read as "no change".
		return nil, fmt.Errorf("no plugins installed in %s: install them with meshrelay plugin install, or name their directory with --plugin-dir", pluginDir)
	}
	fleet, err := offline.ReadFleet(clustersDir, policiesDir, logger)
	if err != nil {
		return nil, err
	}
	rep, err := preview.Run(ctx, ts, preview.Fleet{Inputs: fleet.Inputs, Policies: fleet.Policies, Labels: fleet.Labels}, change)
	if errors.Is(err, preview.ErrChange) {
		return nil, &exitError{code: 2, err: err}
	}
	return rep, err
}

// printDiff prints a report for people. Every text plugins or policy
// authors control goes through meta.Printable.
func printDiff(w io.Writer, rep *preview.Report) {
	if rep.Empty() {
		fmt.Fprintln(w, "No change.")
		return
	}
	for _, o := range rep.Outputs {
		fmt.Fprintf(w, "cluster %s, backend %s:\n", meta.Printable(o.Cluster), meta.Printable(o.Backend))
		for _, r := range o.Created {
			fmt.Fprintf(w, "  + created %s\n", meta.Printable(r.Resource))
		}
		for _, r := range o.Changed {
			fmt.Fprintf(w, "  ~ changed %s\n", meta.Printable(r.Resource))
			for line := range strings.Lines(r.Diff) {
				fmt.Fprintf(w, "      %s\n", meta.Printable(strings.TrimSuffix(line, "\n")))
			}
		}
		for _, r := range o.Deleted {
			fmt.Fprintf(w, "  - deleted %s\n", meta.Printable(r.Resource))
		}
	}
	diags := func(title, sign string, ds []preview.Diagnostic) {
		if len(ds) == 0 {
			return
		}
		fmt.Fprintf(w, "diagnostics %s:\n", title)
		for _, d := range ds {
			where := meta.Printable(d.Plugin)
			if d.Cluster != "" {
				where += ", cluster " + meta.Printable(d.Cluster)
			}
			path := ""
			if d.Path != "" {
				path = meta.Printable(d.Path) + ": "
			}
			fmt.Fprintf(w, "  %s %s %s: %s%s (%s)\n", sign, d.Severity, meta.Printable(d.Policy), path, meta.Printable(d.Summary), where)
		}
	}
	diags("added", "+", rep.DiagnosticsAdded)
	diags("cleared", "-", rep.DiagnosticsCleared)
}
