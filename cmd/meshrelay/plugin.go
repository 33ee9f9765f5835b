package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshrelay/meshrelay/core/pluginhost"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/spf13/cobra"
)

func newPluginCommand(logs *logOptions) *cobra.Command {
	dir := "plugins"
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Install, publish, list, verify and remove translator plugins; scaffold a new one",
		Long: `Translator plugins are executables named meshrelay-plugin-NAME. They are
installed into a plugin directory whose lock file records each plugin's name,
version, protocol, backends and SHA-256; the server verifies the checksum
before every start and refuses a binary that changed. Plugins are published
to OCI registries, signed, for every platform (push), installed from them
with the signature verified (install oci://…), pinned by the lock file
(install --from-lock), and carried to air-gapped machines (pull --to).`,
		Example: `  meshrelay plugin install ./bin/meshrelay-plugin-istio --plugin-dir /plugins
  meshrelay plugin install https://example.com/meshrelay-plugin-acme --sha256 3f1c...
  meshrelay plugin install oci://ghcr.io/acme/meshrelay-plugin-acme:0.1.0 --verify-key acme.pub
  meshrelay plugin list
  meshrelay plugin init acme && meshrelay plugin install ./meshrelay-plugin-acme`,
	}
	cmd.PersistentFlags().StringVar(&dir, "plugin-dir", dir, "the plugin directory")

	var sum string
	var lockPath string
	var useLock bool
	var ociFlags ociOptions
	install := &cobra.Command{
		Use:   "install PATH|DIR|URL|oci://REGISTRY/REPO:VERSION|oci-layout://DIR:VERSION",
		Short: "Install a plugin from a file, a Go module directory, a URL or an OCI registry",
		Long: `Install a plugin into the plugin directory. A directory holds the plugin's
main package: it is built with the local Go toolchain (go build -trimpath) and
the binary installed. A file's checksum is computed (and must equal --sha256
when given); a URL is downloaded and needs --sha256. The plugin is started
once to ask what it is; a plugin that speaks no supported protocol version is
refused.

An oci:// reference (a tag or @sha256:…) or an oci-layout:// directory
installs the binary for this platform from a plugin artifact published with
meshrelay plugin push. Its signature must verify with a trusted key
(--verify-key, or the PEM public keys in the plugin directory's trusted-keys
file); an unsigned or wrongly signed artifact is refused unless
--insecure-skip-verify. Every blob is checked against its digest, and the
lock file records the index digest and the sha256 of every platform's
binary. --from-lock installs exactly what the lock file names, for this
platform, and fails if any digest differs (like terraform init).

Registry credentials come from the Docker config file ($DOCKER_CONFIG or
~/.docker/config.json, with its credential helpers, as docker login, helm
registry login and oras login write it), then $REGISTRY_AUTH_FILE.`,
		Example: `  meshrelay plugin install ./meshrelay-plugin-acme
  meshrelay plugin install ./bin/meshrelay-plugin-cilium
  meshrelay plugin install https://example.com/meshrelay-plugin-acme --sha256 3f1c0a...
  meshrelay plugin install oci://ghcr.io/acme/meshrelay-plugin-acme:0.1.0 --verify-key acme.pub
  meshrelay plugin install --from-lock --plugin-dir /plugins
  meshrelay plugin install oci-layout://./acme-layout:0.1.0 --verify-key acme.pub`,
		Args: func(cmd *cobra.Command, args []string) error {
			if useLock {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			logger, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if useLock || len(args) == 1 && pluginhost.IsOCIReference(args[0]) {
				opts, err := ociFlags.options(logger)
				if err != nil {
					return err
				}
				if useLock {
					entries, err := pluginhost.InstallFromLock(cmd.Context(), dir, lockPath, opts)
					if err != nil {
						return err
					}
					for _, e := range entries {
						fmt.Fprintf(cmd.OutOrStdout(), "installed %s %s for %s (sha256 %s)\n", e.Name, e.Version, pluginhost.HostPlatform(), e.SHA256)
					}
					return nil
				}
				e, err := pluginhost.InstallOCI(cmd.Context(), dir, args[0], opts)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "installed %s %s (protocol %d, backends %s, index %s, sha256 %s)\n",
					e.Name, e.Version, e.Protocol, strings.Join(e.Backends, ","), e.Digest, e.SHA256)
				return nil
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
	install.Flags().BoolVar(&useLock, "from-lock", false, "install exactly what the lock file names, for this platform")
	install.Flags().StringVar(&lockPath, "lock", "", "with --from-lock: the lock file to read, e.g. from a ConfigMap (default: the plugin directory's)")
	ociFlags.addFlags(install, true)

	var signKey string
	var pushFlags ociOptions
	push := &cobra.Command{
		Use:   "push DIR|BINARY...|oci-layout://DIR:VERSION oci://REGISTRY/REPO[:VERSION]",
		Short: "Publish a plugin's binaries for every platform to an OCI registry",
		Long: `Publish a plugin as an OCI image index with one manifest per platform, each
with one layer, the platform's binary, and a config blob holding what the
plugin declares (name, version, protocol, backends, input and output kinds),
readable without running it. Binaries are named meshrelay-plugin-NAME-OS-ARCH,
as the scaffold's make release writes them into dist/; a directory stands for
every such file in it. The binary for this platform is started once to
describe the plugin; without a tag, the plugin's version is the tag.
--sign-key signs the index digest (cosign's key-based
signature layout: a tag sha256-HEX.sig beside it) with a PEM private key from
meshrelay plugin keygen. The destination may also be an oci-layout://
directory.

An oci-layout:// source (from meshrelay plugin pull --to) is copied as it is,
with its signature, into the registry: the air-gapped mirror.`,
		Example: `  make release && meshrelay plugin push dist/ oci://ghcr.io/acme/meshrelay-plugin-acme:0.1.0 --sign-key acme.key
  meshrelay plugin push oci-layout://./acme-layout:0.1.0 oci://registry.internal/plugins/acme:0.1.0`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			logger, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			dst := args[len(args)-1]
			ropts, err := pushFlags.registry()
			if err != nil {
				return err
			}
			if len(args) == 2 && strings.HasPrefix(args[0], pluginhost.SchemeOCILayout) {
				if signKey != "" {
					return fmt.Errorf("push %s: --sign-key signs new artifacts; a copied layout keeps its own signature", args[0])
				}
				d, err := pluginhost.Copy(cmd.Context(), args[0], dst, ropts)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "copied %s to %s (index %s)\n", args[0], dst, d.Digest)
				return nil
			}
			bins, err := pluginhost.ReleaseBinaries(args[:len(args)-1])
			if err != nil {
				return err
			}
			opts := pluginhost.PushOptions{Registry: ropts, Logger: logger}
			if signKey != "" {
				data, err := os.ReadFile(signKey)
				if err != nil {
					return err
				}
				if opts.SignKey, err = pluginhost.ParsePrivateKey(data); err != nil {
					return fmt.Errorf("%s: %w", signKey, err)
				}
			}
			d, err := pluginhost.Push(cmd.Context(), dst, bins, opts)
			if err != nil {
				return err
			}
			platforms := make([]string, 0, len(bins))
			for p := range bins {
				platforms = append(platforms, p)
			}
			slices.Sort(platforms)
			signed := "unsigned"
			if signKey != "" {
				signed = "signed"
			}
			tag := d.Annotations[ocispec.AnnotationRefName]
			if strings.HasSuffix(dst, ":"+tag) {
				tag = ""
			} else {
				tag = ":" + tag
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s%s: index %s for %s, %s\n", dst, tag, d.Digest, strings.Join(platforms, ", "), signed)
			return nil
		},
	}
	push.Flags().StringVar(&signKey, "sign-key", "", "PEM private key (ECDSA P-256 or Ed25519) to sign the index digest with")
	pushFlags.addFlags(push, false)

	var to string
	var pullFlags ociOptions
	pull := &cobra.Command{
		Use:   "pull oci://REGISTRY/REPO:VERSION --to DIR",
		Short: "Copy a plugin artifact, every platform and its signature, into an OCI layout directory",
		Long: `Copy a plugin artifact with every platform's binary and its signature into
an OCI layout directory, for machines without a registry: install it there
with meshrelay plugin install oci-layout://DIR:VERSION, or copy it into a
private registry with meshrelay plugin push oci-layout://DIR:VERSION oci://….
The signature is verified as install verifies it.`,
		Example: `  meshrelay plugin pull oci://ghcr.io/acme/meshrelay-plugin-acme:0.1.0 --to ./acme-layout --verify-key acme.pub`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return errors.New("pull: --to DIR is required")
			}
			logger, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			opts, err := pullFlags.options(logger)
			if err != nil {
				return err
			}
			d, err := pluginhost.Pull(cmd.Context(), args[0], to, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pulled %s into %s (index %s)\n", args[0], to, d.Digest)
			return nil
		},
	}
	pull.Flags().StringVar(&to, "to", "", "the OCI layout directory to write")
	pullFlags.addFlags(pull, true)

	var keyOut string
	keygen := &cobra.Command{
		Use:   "keygen --out NAME",
		Short: "Write a new signing key pair: NAME.key (keep secret) and NAME.pub (publish)",
		Long: `Write a new ECDSA P-256 key pair for signing plugin artifacts: NAME.key, a
PEM PKCS#8 private key for meshrelay plugin push --sign-key, and NAME.pub, the
PEM public key users pass to --verify-key or add to their plugin directory's
trusted-keys file.`,
		Example: `  meshrelay plugin keygen --out acme`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyOut == "" {
				return errors.New("keygen: --out NAME is required")
			}
			priv, pub, err := pluginhost.GenerateKey()
			if err != nil {
				return err
			}
			if err := os.WriteFile(keyOut+".key", priv, 0o600); err != nil {
				return err
			}
			if err := os.WriteFile(keyOut+".pub", pub, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s.key and %s.pub\n", keyOut, keyOut)
			return nil
		},
	}
	keygen.Flags().StringVar(&keyOut, "out", "", "the key pair's file name, without .key or .pub")

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
and a Makefile, then run go mod tidy, so that the module's test passes as
generated. Edit translator.go, then install the directory with meshrelay
plugin install DIR. To publish it: make release cross-builds dist/ (PLATFORMS,
default linux/amd64 linux/arm64 darwin/arm64), and meshrelay plugin push dist/
oci://REGISTRY/REPO:VERSION --sign-key KEY (or make push REF=… SIGN_KEY=…).
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
			fmt.Fprintf(cmd.OutOrStdout(), "scaffolded %s in %s\nnext: edit %s, then: meshrelay plugin install %s\npublish: cd %s && make release && meshrelay plugin push dist/ oci://REGISTRY/REPO:VERSION --sign-key KEY\n",
				name, target, filepath.Join(target, "translator.go"), target, target)
			return nil
		},
	}
	initCmd.Flags().StringVar(&module, "module", "", "Go module path of the new project")
	initCmd.Flags().StringVar(&local, "meshrelay", "", "a local meshrelay checkout to use through a replace directive")

	cmd.AddCommand(install, push, pull, keygen, list, verify, remove, initCmd)
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

// ociOptions are the flags of the commands that reach OCI registries.
type ociOptions struct {
	plainHTTP, plainHTTPAnyHost, skipVerify bool
	verifyKeys                              []string
}

func (o *ociOptions) addFlags(cmd *cobra.Command, verify bool) {
	cmd.Flags().BoolVar(&o.plainHTTP, "plain-http", false, "reach the registry over plain HTTP (only a loopback registry, unless --plain-http-any-host)")
	cmd.Flags().BoolVar(&o.plainHTTPAnyHost, "plain-http-any-host", false, "with --plain-http: allow plain HTTP to a registry that is not on loopback")
	if verify {
		cmd.Flags().StringSliceVar(&o.verifyKeys, "verify-key", nil, "PEM public key file trusted to sign plugin artifacts (repeatable; adds to the plugin directory's trusted-keys)")
		cmd.Flags().BoolVar(&o.skipVerify, "insecure-skip-verify", false, "install artifacts that are unsigned or signed by no trusted key")
	}
}

func (o *ociOptions) registry() (pluginhost.RegistryOptions, error) {
	if o.plainHTTPAnyHost && !o.plainHTTP {
		return pluginhost.RegistryOptions{}, errors.New("--plain-http-any-host needs --plain-http")
	}
	return pluginhost.RegistryOptions{PlainHTTP: o.plainHTTP, PlainHTTPAnyHost: o.plainHTTPAnyHost}, nil
}

func (o *ociOptions) options(logger *slog.Logger) (pluginhost.OCIOptions, error) {
	ropts, err := o.registry()
	if err != nil {
		return pluginhost.OCIOptions{}, err
	}
	opts := pluginhost.OCIOptions{Registry: ropts, InsecureSkipVerify: o.skipVerify, Logger: logger}
	for _, path := range o.verifyKeys {
		data, err := os.ReadFile(path)
		if err != nil {
			return pluginhost.OCIOptions{}, err
		}
		keys, err := pluginhost.ParsePublicKeys(data)
		if err != nil {
			return pluginhost.OCIOptions{}, fmt.Errorf("%s: %w", path, err)
		}
		opts.VerifyKeys = append(opts.VerifyKeys, keys...)
	}
	return opts, nil
}
