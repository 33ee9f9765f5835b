package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// outputFlag adds -o table|yaml|json to a command that prints data.
func outputFlag(cmd *cobra.Command, out *string) {
	cmd.Flags().StringVarP(out, "output", "o", "table", "output format: table, yaml or json")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "yaml", "json"}, cobra.ShellCompDirectiveNoFileComp
	})
}

// printData prints v as yaml or json; table printing is the caller's.
func printData(w io.Writer, format string, v any) error {
	var data []byte
	var err error
	if m, ok := v.(proto.Message); ok {
		data, err = protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(m)
	} else {
		data, err = json.MarshalIndent(v, "", "  ")
	}
	if err != nil {
		return err
	}
	switch format {
	case "json":
		_, err = fmt.Fprintln(w, string(data))
	case "yaml":
		y, yerr := yaml.JSONToYAML(data)
		if yerr != nil {
			return yerr
		}
		_, err = w.Write(y)
	default:
		return &exitError{code: 2, err: fmt.Errorf("--output must be table, yaml or json, not %q", format)}
	}
	return err
}

// table writes aligned columns. Every cell goes through meta.Printable:
// cells hold text agents and plugins control (names, errors, summaries),
// which must neither break the table's rows nor reach the terminal as
// escape sequences.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(toAny(headers)...)
	return t
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (t *table) row(cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = meta.Printable(fmt.Sprint(c))
	}
	fmt.Fprintln(t.tw, strings.Join(parts, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
