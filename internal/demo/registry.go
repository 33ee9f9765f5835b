package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// LocalRegistry is the value of the demo's --plugins that publishes the
// plugins to an OCI registry the demo starts on loopback and installs them
// from there.
const LocalRegistry = "oci://"

// installThroughRegistry starts an OCI registry on a loopback port,
// pushes each plugin's binary there signed with a key made for the run,
// and installs it from the registry into pluginDir with the signature
// verified, as a user installs a published plugin. The registry stops when
// it returns.
func installThroughRegistry(ctx context.Context, names []string, bins map[string]string, pluginDir string, logger *slog.Logger, say func(string, ...any)) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start the plugin registry: %w", err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("plugin registry", "error", err)
		}
	}()
	privPEM, pubPEM, err := pluginhost.GenerateKey()
	if err != nil {
		return err
	}
	key, err := pluginhost.ParsePrivateKey(privPEM)
	if err != nil {
		return err
	}
	trusted, err := pluginhost.ParsePublicKeys(pubPEM)
	if err != nil {
		return err
	}
	reg := pluginhost.RegistryOptions{PlainHTTP: true}
	say("  publishing the plugins to a registry on %s, signed with key %s…", l.Addr(), trusted[0].Fingerprint[:19])
	for _, name := range names {
		repo := fmt.Sprintf("oci://%s/meshrelay/%s%s", l.Addr(), pluginhost.BinaryPrefix, name)
		idx, err := pluginhost.Push(ctx, repo, map[string]string{pluginhost.HostPlatform(): bins[name]}, pluginhost.PushOptions{Registry: reg, SignKey: key, Logger: logger})
		if err != nil {
			return err
		}
		ref := repo + ":" + idx.Annotations[ocispec.AnnotationRefName]
		e, err := pluginhost.InstallOCI(ctx, pluginDir, ref, pluginhost.OCIOptions{Registry: reg, VerifyKeys: trusted, Logger: logger})
		if err != nil {
			return err
		}
		say("  installed plugin %-7s %s  from %s (index %s…)", e.Name, e.Version, ref, e.Digest[:19])
	}
	return nil
}
