package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/spf13/cobra"
)

func newPluginCommand(logs *logOptions) *cobra.Command {
	dir := "plugins"
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Install, list, verify and remove translator plugins; scaffold a new one",
		Long: `Translator plugins are executables named meshrelay-plugin-NAME. They are
installed into a plugin directory whose lock file records each plugin's name,
version, protocol, backends and SHA-256; the server verifies the checksum
before every start and refuses a binary that changed.`,
		Example: `  meshrelay plugin install ./bin/meshrelay-plugin-istio --plugin-dir /plugins
  meshrelay plugin install https://example.com/meshrelay-plugin-acme --sha256 3f1c...
  meshrelay plugin list
  meshrelay plugin init acme && meshrelay plugin install ./meshrelay-plugin-acme`,
	}
	cmd.PersistentFlags().StringVar(&dir, "plugin-dir", dir, "the plugin directory")

	var sum string
	install := &cobra.Command{
		Use:   "install PATH|DIR|URL",
		Short: "Install a plugin from a file, a Go module directory or an HTTP(S) URL",
		Long: `Install a plugin into the plugin directory. A directory holds the plugin's
main package: it is built with the local Go toolchain (go build -trimpath) and
the binary installed. A file's checksum is computed (and must equal --sha256
when given); a URL is downloaded and needs --sha256. The plugin is started
once to ask what it is; a plugin that speaks no supported protocol version is
refused.`,
		Example: `  meshrelay plugin install ./meshrelay-plugin-acme
  meshrelay plugin install ./bin/meshrelay-plugin-cilium
  meshrelay plugin install https://example.com/meshrelay-plugin-acme --sha256 3f1c0a...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			logger, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			e, err := pluginhost.InstallContext(cmd.Context(), dir, args[0], sum, logger)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installed %s %s (protocol %d, backends %s, sha256 %s)\n",
				e.Name, e.Version, e.Protocol, strings.Join(e.Backends, ","), e.SHA256)
			return nil
		},
	}
	install.Flags().StringVar(&sum, "sha256", "", "expected SHA-256 of the binary (required for URLs)")

	var out string
	list := &cobra.Command{
		Use:     "list",
		Short:   "List installed plugins with versions, checksums and whether they verify",
		Example: `  meshrelay plugin list -o json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			entries, err := pluginhost.List(dir)
			if err != nil {
				return err
			}
			type row struct {
				pluginhost.Entry
				Verified bool `json:"verified"`
			}
			var rows []row
			for _, e := range entries {
				rows = append(rows, row{Entry: e, Verified: fileSHA256(dir, e.Path) == e.SHA256})
			}
			if out != "table" {
				return printData(cmd.OutOrStdout(), out, rows)
			}
			t := newTable(cmd.OutOrStdout(), "NAME", "VERSION", "PROTOCOL", "BACKENDS", "SHA256", "VERIFIED")
			for _, r := range rows {
				t.row(r.Name, r.Version, r.Protocol, strings.Join(r.Backends, ","), r.SHA256[:16]+"…", r.Verified)
			}
			return t.flush()
		},
	}
	outputFlag(list, &out)

	verify := &cobra.Command{
		Use:     "verify",
		Short:   "Recompute every plugin's checksum; exit 3 on a mismatch",
		Example: `  meshrelay plugin verify --plugin-dir /plugins`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pluginhost.Verify(dir); err != nil {
				return problem("%v", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "every plugin matches its recorded checksum")
			return nil
		},
	}

	remove := &cobra.Command{
		Use:     "remove NAME",
		Short:   "Remove an installed plugin",
		Example: `  meshrelay plugin remove cilium`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := pluginhost.Remove(dir, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return nil
		},
	}

	var module, local string
	initCmd := &cobra.Command{
		Use:   "init NAME [DIR]",
		Short: "Scaffold a new translator plugin project that builds and tests at once",
		Long: `Scaffold a translator plugin project in DIR (default meshrelay-plugin-NAME):
go.mod, main.go (sdk.Serve), translator.go to edit, a test and its fixture,
then run go mod tidy, so that the module's test passes as generated. Edit
translator.go, then install the directory with meshrelay plugin install DIR.
examples/netpol/README.md is the tutorial that goes with it.`,
		Example: `  meshrelay plugin init acme
  meshrelay plugin init acme ./acme --module example.com/acme --meshrelay ../meshrelay`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			target := "meshrelay-plugin-" + name
			if len(args) == 2 {
				target = args[1]
			}
			mod := module
			if mod == "" {
				mod = "example.com/meshrelay-plugin-" + name
			}
			if err := pluginhost.Scaffold(cmd.Context(), target, name, mod, local); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "scaffolded %s in %s\nnext: edit %s, then: meshrelay plugin install %s\n",
				name, target, filepath.Join(target, "translator.go"), target)
			return nil
		},
	}
	initCmd.Flags().StringVar(&module, "module", "", "Go module path of the new project")
	initCmd.Flags().StringVar(&local, "meshrelay", "", "a local meshrelay checkout to use through a replace directive")

	cmd.AddCommand(install, list, verify, remove, initCmd)
	return cmd
}

// fileSHA256 returns the hex SHA-256 of a plugin binary, or "" when unreadable.
func fileSHA256(dir, path string) string {
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
