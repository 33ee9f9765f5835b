package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// The media types of a plugin artifact: an OCI image index of
// ArtifactType with one image manifest per platform, each with the config
// blob (ConfigMediaType, an [ArtifactConfig]) and exactly one layer, the
// platform's binary (BinaryMediaType, titled meshrelay-plugin-NAME).
const (
	ArtifactType    = "application/vnd.meshrelay.plugin.v1"
	ConfigMediaType = "application/vnd.meshrelay.plugin.config.v1+json"
	BinaryMediaType = "application/vnd.meshrelay.plugin.binary.v1"
)

// The schemes of plugin references: a registry (oci://HOST/REPO:TAG or
// @sha256:…) and an OCI layout directory (oci-layout://DIR:TAG).
const (
	SchemeOCI       = "oci://"
	SchemeOCILayout = "oci-layout://"
)

// ErrDigest is wrapped by the error of installing an artifact whose
// content does not match its digest, or whose digests differ from the lock
// file's.
var ErrDigest = errors.New("plugin artifact digest mismatch")

// ArtifactConfig is the config blob of a plugin artifact: what the plugin
// declared in Describe when it was pushed, readable without running it.
type ArtifactConfig struct {
	Name        string   `json:"name"`
	Version     string   `json:"version"`
	Protocol    int      `json:"protocol"`
	Backends    []string `json:"backends"`
	Meshes      []string `json:"meshes,omitempty"`
	InputKinds  []string `json:"inputKinds,omitempty"`
	OutputKinds []string `json:"outputKinds,omitempty"`
}

// RegistryOptions say how registries are reached. Credentials come from
// the Docker config file ($DOCKER_CONFIG/config.json, else
// ~/.docker/config.json, with its credential helpers), then from the file
// $REGISTRY_AUTH_FILE names (podman's and skopeo's), as `helm registry
// login` and oras read them.
type RegistryOptions struct {
	// PlainHTTP reaches the registry over HTTP instead of HTTPS; it is
	// refused for a host that is not loopback unless PlainHTTPAnyHost.
	PlainHTTP, PlainHTTPAnyHost bool
}

// OCIOptions configure pulling and installing plugin artifacts.
type OCIOptions struct {
	Registry RegistryOptions
	// VerifyKeys are the public keys trusted to sign artifacts, besides
	// those in the plugin directory's trusted-keys file.
	VerifyKeys []PublicKey
	// InsecureSkipVerify installs artifacts that are unsigned or signed by
	// no trusted key.
	InsecureSkipVerify bool
	// Platform is the "os/arch" to install; the host's when empty.
	Platform string
	Logger   *slog.Logger
}

func (o OCIOptions) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

func (o OCIOptions) platform() string {
	if o.Platform != "" {
		return o.Platform
	}
	return HostPlatform()
}

// HostPlatform returns this binary's "os/arch".
func HostPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// IsOCIReference reports whether ref names a registry or an OCI layout.
func IsOCIReference(ref string) bool {
	return strings.HasPrefix(ref, SchemeOCI) || strings.HasPrefix(ref, SchemeOCILayout)
}

// location is a parsed plugin reference: a store and a tag or digest in it.
type location struct {
	raw string
	// repo names the repository in signatures: HOST/REPO, or the layout
	// directory.
	repo      string
	reference string
	// layoutDir is set for oci-layout:// references.
	layoutDir string
	remote    *registry.Reference
}

func parseLocation(ref string) (location, error) {
	switch {
	case strings.HasPrefix(ref, SchemeOCI):
		r, err := registry.ParseReference(strings.TrimPrefix(ref, SchemeOCI))
		if err != nil {
			return location{}, fmt.Errorf("parse %s: %w", ref, err)
		}
		return location{raw: ref, repo: r.Registry + "/" + r.Repository, reference: r.Reference, remote: &r}, nil
	case strings.HasPrefix(ref, SchemeOCILayout):
		rest := strings.TrimPrefix(ref, SchemeOCILayout)
		var dir, tag string
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			dir, tag = rest[:i], rest[i+1:]
		} else if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
			dir, tag = rest[:i], rest[i+1:]
		}
		if dir == "" || tag == "" {
			return location{}, fmt.Errorf("parse %s: want oci-layout://DIR:TAG or oci-layout://DIR@sha256:…", ref)
		}
		return location{raw: ref, repo: dir, reference: tag, layoutDir: dir}, nil
	}
	return location{}, fmt.Errorf("parse %s: want oci://REGISTRY/REPO:TAG or oci-layout://DIR:TAG", ref)
}

// withDigest returns the location pinned to a digest.
func (l location) withDigest(d string) location {
	l.reference = d
	if l.remote != nil {
		r := *l.remote
		r.Reference = d
		l.remote = &r
	}
	return l
}

// target opens the location's store for writing; a layout directory is
// created.
func (l location) target(ctx context.Context, opts RegistryOptions) (oras.Target, error) {
	if l.layoutDir != "" {
		s, err := oci.NewWithContext(ctx, l.layoutDir)
		if err != nil {
			return nil, fmt.Errorf("open OCI layout %s: %w", l.layoutDir, contentError(err))
		}
		return s, nil
	}
	repo, err := remote.NewRepository(l.remote.Registry + "/" + l.remote.Repository)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", l.raw, err)
	}
	if opts.PlainHTTP {
		if !opts.PlainHTTPAnyHost && !isLoopback(l.remote.Host()) {
			return nil, fmt.Errorf("open %s: plain HTTP is allowed only to a loopback registry, not %s", l.raw, l.remote.Host())
		}
		repo.PlainHTTP = true
	}
	store, err := credentialStore()
	if err != nil {
		return nil, fmt.Errorf("open %s: registry credentials: %w", l.raw, err)
	}
	repo.Client = &auth.Client{Client: retry.DefaultClient, Cache: auth.NewCache(), Credential: credentials.Credential(store)}
	return repo, nil
}

// source opens the location's store for reading; a layout directory is
// only read, so that it may be read-only.
func (l location) source(ctx context.Context, opts RegistryOptions) (oras.ReadOnlyTarget, error) {
	if l.layoutDir == "" {
		return l.target(ctx, opts)
	}
	s, err := oci.NewFromFS(ctx, os.DirFS(l.layoutDir))
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", l.layoutDir, contentError(err))
	}
	return s, nil
}

// credentialStore reads the Docker config file, then $REGISTRY_AUTH_FILE.
func credentialStore() (credentials.Store, error) {
	docker, err := credentials.NewStoreFromDocker(credentials.StoreOptions{})
	if err != nil {
		return nil, err
	}
	if path := os.Getenv("REGISTRY_AUTH_FILE"); path != "" {
		other, err := credentials.NewStore(path, credentials.StoreOptions{})
		if err != nil {
			return nil, err
		}
		return credentials.NewStoreWithFallbacks(docker, other), nil
	}
	return docker, nil
}

func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PushOptions configure [Push].
type PushOptions struct {
	Registry RegistryOptions
	// SignKey, when set, signs the index digest (see [Sign]).
	SignKey PrivateKey
	Logger  *slog.Logger
}

// Push publishes a plugin's binaries, keyed by "os/arch", as one image
// index at ref (oci:// or oci-layout://), tagged with ref's tag, or with
// the plugin's version when ref has none. The
// binary of the host's platform is started once to describe the plugin;
// its description becomes the config blob. The manifests' creation time is
// $SOURCE_DATE_EPOCH when set, so that the same binaries give the same
// digest. Push returns the index's descriptor, annotated with the tag
// (org.opencontainers.image.ref.name).
func Push(ctx context.Context, ref string, binaries map[string]string, opts PushOptions) (ocispec.Descriptor, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	loc, err := parseLocation(ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := digest.Parse(loc.reference); err == nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: name a tag to push to, not a digest", ref)
	}
	host, ok := binaries[HostPlatform()]
	if !ok {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: no binary for %s, the platform it is pushed from, to describe the plugin with (have %s)",
			ref, HostPlatform(), strings.Join(slices.Sorted(maps.Keys(binaries)), ", "))
	}
	cfg, err := describeBinary(ctx, host, logger)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", ref, err)
	}
	dst, err := loc.target(ctx, opts.Registry)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	created, err := createdTime()
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", ref, err)
	}
	cfgData, err := json.Marshal(cfg)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", ref, err)
	}
	cfgDesc := content.NewDescriptorFromBytes(ConfigMediaType, cfgData)
	if err := pushBlob(ctx, dst, cfgDesc, strings.NewReader(string(cfgData))); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: config: %w", ref, err)
	}
	index := ocispec.Index{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageIndex,
		ArtifactType: ArtifactType,
		Annotations: map[string]string{
			ocispec.AnnotationTitle:   cfg.Name,
			ocispec.AnnotationVersion: cfg.Version,
			ocispec.AnnotationCreated: created,
		},
	}
	for _, platform := range slices.Sorted(maps.Keys(binaries)) {
		p, err := parsePlatform(platform)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", ref, err)
		}
		layer, err := pushFile(ctx, dst, binaries[platform], BinaryMediaType)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("push %s: binary for %s: %w", ref, platform, err)
		}
		layer.Annotations = map[string]string{ocispec.AnnotationTitle: BinaryPrefix + cfg.Name}
		m, err := oras.PackManifest(ctx, dst, oras.PackManifestVersion1_1, ArtifactType, oras.PackManifestOptions{
			Layers:              []ocispec.Descriptor{layer},
			ConfigDescriptor:    &cfgDesc,
			ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: created},
		})
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("push %s: manifest for %s: %w", ref, platform, err)
		}
		m.Annotations = nil
		m.Platform = p
		index.Manifests = append(index.Manifests, m)
	}
	data, err := json.Marshal(index)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", ref, err)
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageIndex, data)
	desc.ArtifactType = ArtifactType
	if err := pushBlob(ctx, dst, desc, strings.NewReader(string(data))); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: index: %w", ref, err)
	}
	tag := loc.reference
	if tag == "" {
		tag = cfg.Version
	}
	if err := dst.Tag(ctx, desc, tag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: tag: %w", ref, err)
	}
	if opts.SignKey.signer != nil {
		if err := sign(ctx, dst, loc.repo, desc, opts.SignKey); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", ref, err)
		}
	}
	desc.Annotations = map[string]string{ocispec.AnnotationRefName: tag}
	return desc, nil
}

// createdTime is $SOURCE_DATE_EPOCH in RFC 3339, or now.
func createdTime() (string, error) {
	t := time.Now().UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return "", fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		t = time.Unix(sec, 0).UTC()
	}
	return t.Format(time.RFC3339), nil
}

func parsePlatform(s string) (*ocispec.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return nil, fmt.Errorf("platform %q: want os/arch or os/arch/variant", s)
	}
	p := &ocispec.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

func platformString(p *ocispec.Platform) string {
	if p == nil {
		return ""
	}
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// describeBinary starts a binary once and returns what it declares.
func describeBinary(ctx context.Context, path string, logger *slog.Logger) (ArtifactConfig, error) {
	sum, err := fileSHA256(path)
	if err != nil {
		return ArtifactConfig{}, err
	}
	proc, err := launch(ctx, filepath.Base(path), path, sum, DefaultOptions(), logger)
	if err != nil {
		return ArtifactConfig{}, err
	}
	defer proc.kill()
	d := proc.desc
	return ArtifactConfig{
		Name: d.GetName(), Version: d.GetVersion(), Protocol: proc.version, Backends: proc.backends(),
		Meshes: sortedSet(d.GetMeshes()), InputKinds: sortedSet(d.GetInputKinds()), OutputKinds: sortedSet(d.GetOutputKinds()),
	}, nil
}

func pushBlob(ctx context.Context, dst content.Storage, desc ocispec.Descriptor, r io.Reader) error {
	if ok, err := dst.Exists(ctx, desc); err == nil && ok {
		return nil
	}
	if err := dst.Push(ctx, desc, r); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return err
	}
	return nil
}

// pushFile pushes a file as a blob and returns its descriptor.
func pushFile(ctx context.Context, dst content.Storage, path, mediaType string) (ocispec.Descriptor, error) {
	f, err := os.Open(path)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer f.Close()
	d, err := digest.SHA256.FromReader(f)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: size}
	return desc, pushBlob(ctx, dst, desc, f)
}

// ReleaseBinaries finds the binaries of each platform among paths, as
// `make release` names them: meshrelay-plugin-NAME-OS-ARCH (a ".exe"
// suffix is dropped). A path that is a directory contributes every such
// file in it. It returns the paths keyed by "os/arch".
func ReleaseBinaries(paths []string) (map[string]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("release binaries: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("release binaries: %w", err)
		}
		for _, e := range ents {
			if !e.IsDir() && strings.HasPrefix(e.Name(), BinaryPrefix) {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}
	out := map[string]string{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".exe")
		parts := strings.Split(name, "-")
		if len(parts) < 3 {
			return nil, fmt.Errorf("release binaries: %s is not named NAME-OS-ARCH", f)
		}
		platform := parts[len(parts)-2] + "/" + parts[len(parts)-1]
		if prev, ok := out[platform]; ok {
			return nil, fmt.Errorf("release binaries: %s and %s are both for %s", prev, f, platform)
		}
		out[platform] = f
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("release binaries: none named %sNAME-OS-ARCH in %s", BinaryPrefix, strings.Join(paths, ", "))
	}
	return out, nil
}

// artifact is a resolved, verified plugin artifact.
type artifact struct {
	loc    location
	src    oras.ReadOnlyTarget
	index  ocispec.Descriptor
	config ArtifactConfig
	// layers are each platform's binary.
	layers map[string]ocispec.Descriptor
}

// platforms returns each platform's binary sha256, in hex.
func (a *artifact) platforms() map[string]string {
	out := map[string]string{}
	for p, l := range a.layers {
		out[p] = l.Digest.Encoded()
	}
	return out
}

// resolve finds the index loc names, checks its signature (unless
// skipVerify) and reads its manifests and config, each checked against its
// digest.
func resolve(ctx context.Context, loc location, opts OCIOptions, keys []PublicKey) (*artifact, error) {
	if loc.reference == "" {
		return nil, fmt.Errorf("resolve %s: no tag or digest", loc.raw)
	}
	src, err := loc.source(ctx, opts.Registry)
	if err != nil {
		return nil, err
	}
	desc, err := src.Resolve(ctx, loc.reference)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", loc.raw, err)
	}
	if desc.MediaType != ocispec.MediaTypeImageIndex {
		return nil, fmt.Errorf("resolve %s: %s is a %s, not an image index", loc.raw, desc.Digest, desc.MediaType)
	}
	if d, err := digest.Parse(loc.reference); err == nil && d != desc.Digest {
		return nil, fmt.Errorf("resolve %s: %w: index is %s", loc.raw, ErrDigest, desc.Digest)
	}
	if !opts.InsecureSkipVerify {
		if err := verifySignature(ctx, src, desc, keys); err != nil {
			return nil, fmt.Errorf("verify %s: %w", loc.raw, err)
		}
	}
	data, err := content.FetchAll(ctx, src, desc)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: index %s: %w", loc.raw, desc.Digest, contentError(err))
	}
	var index ocispec.Index
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("fetch %s: index %s: %w", loc.raw, desc.Digest, err)
	}
	if index.ArtifactType != ArtifactType {
		return nil, fmt.Errorf("fetch %s: index %s has artifact type %q, not a meshrelay plugin (%s)", loc.raw, desc.Digest, index.ArtifactType, ArtifactType)
	}
	a := &artifact{loc: loc, src: src, index: desc, layers: map[string]ocispec.Descriptor{}}
	var cfgDesc *ocispec.Descriptor
	for _, md := range index.Manifests {
		platform := platformString(md.Platform)
		if platform == "" {
			return nil, fmt.Errorf("fetch %s: manifest %s has no platform", loc.raw, md.Digest)
		}
		mdata, err := content.FetchAll(ctx, src, md)
		if err != nil {
			return nil, fmt.Errorf("fetch %s: manifest for %s: %w", loc.raw, platform, contentError(err))
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(mdata, &m); err != nil {
			return nil, fmt.Errorf("fetch %s: manifest for %s: %w", loc.raw, platform, err)
		}
		if len(m.Layers) != 1 || m.Layers[0].MediaType != BinaryMediaType || m.Config.MediaType != ConfigMediaType {
			return nil, fmt.Errorf("fetch %s: manifest for %s: want config %s and one layer %s", loc.raw, platform, ConfigMediaType, BinaryMediaType)
		}
		if cfgDesc != nil && cfgDesc.Digest != m.Config.Digest {
			return nil, fmt.Errorf("fetch %s: manifest for %s has another config than the others", loc.raw, platform)
		}
		cfgDesc = &m.Config
		a.layers[platform] = m.Layers[0]
	}
	if cfgDesc == nil {
		return nil, fmt.Errorf("fetch %s: index %s has no manifests", loc.raw, desc.Digest)
	}
	cdata, err := content.FetchAll(ctx, src, *cfgDesc)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: config: %w", loc.raw, contentError(err))
	}
	if err := json.Unmarshal(cdata, &a.config); err != nil {
		return nil, fmt.Errorf("fetch %s: config: %w", loc.raw, err)
	}
	return a, nil
}

// contentError marks a content that does not match its digest.
func contentError(err error) error {
	if errors.Is(err, content.ErrMismatchedDigest) || errors.Is(err, content.ErrTrailingData) {
		return fmt.Errorf("%w: %w", ErrDigest, err)
	}
	return err
}

// fetchBinary writes the platform's binary into a new temporary file in
// dir, checking it against the layer's digest and size, and returns the
// file's path and hex sha256.
func (a *artifact) fetchBinary(ctx context.Context, dir, platform string) (string, string, error) {
	layer, ok := a.layers[platform]
	if !ok {
		return "", "", fmt.Errorf("fetch %s: no binary for %s (the index has %s)", a.loc.raw, platform, strings.Join(slices.Sorted(maps.Keys(a.layers)), ", "))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	tmp, err := os.CreateTemp(dir, ".install-*")
	if err != nil {
		return "", "", err
	}
	fail := func(err error) (string, string, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", "", fmt.Errorf("fetch %s: layer %s for %s: %w", a.loc.raw, layer.Digest, platform, err)
	}
	rc, err := a.src.Fetch(ctx, layer)
	if err != nil {
		return fail(contentError(err))
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(rc, layer.Size+1))
	if err != nil {
		return fail(contentError(err))
	}
	got := hex.EncodeToString(h.Sum(nil))
	if n != layer.Size || got != layer.Digest.Encoded() {
		return fail(fmt.Errorf("%w: got %d bytes with sha256:%s", ErrDigest, n, got))
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	return tmp.Name(), got, nil
}

// trustedKeys returns opts' keys and those of dir's trusted-keys file.
func trustedKeys(dir string, opts OCIOptions) ([]PublicKey, error) {
	keys := slices.Clone(opts.VerifyKeys)
	data, err := os.ReadFile(filepath.Join(dir, TrustedKeysFile))
	if errors.Is(err, os.ErrNotExist) {
		return keys, nil
	}
	if err != nil {
		return nil, err
	}
	more, err := ParsePublicKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, TrustedKeysFile), err)
	}
	return append(keys, more...), nil
}

// InstallOCI installs the plugin ref names (oci://REGISTRY/REPO:TAG or
// @sha256:…, or oci-layout://DIR:TAG) into dir for this platform. The
// index's signature must verify with a trusted key (opts.VerifyKeys, or
// dir's trusted-keys file) unless opts.InsecureSkipVerify; the index, the
// manifests, the config and the binary are each checked against their
// digests; the binary is started once and must declare what the config
// says. The lock entry records the index digest and every platform's
// binary sha256. A refused artifact leaves dir as it was.
func InstallOCI(ctx context.Context, dir, ref string, opts OCIOptions) (Entry, error) {
	loc, err := parseLocation(ref)
	if err != nil {
		return Entry{}, err
	}
	keys, err := trustedKeys(dir, opts)
	if err != nil {
		return Entry{}, fmt.Errorf("install %s: trusted keys: %w", ref, err)
	}
	a, err := resolve(ctx, loc, opts, keys)
	if err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", ref, err)
	}
	tmp, sum, err := a.fetchBinary(ctx, dir, opts.platform())
	if err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", ref, err)
	}
	defer os.Remove(tmp)
	return commitBinary(ctx, dir, ref, tmp, sum, opts.logger(), func(e *Entry) error {
		got := ArtifactConfig{Name: e.Name, Version: e.Version, Protocol: a.config.Protocol, Backends: e.Backends, Meshes: e.Meshes, InputKinds: e.InputKinds, OutputKinds: e.OutputKinds}
		if !sameConfig(got, a.config) {
			return fmt.Errorf("the binary declares %+v, the artifact's config %+v", got, a.config)
		}
		e.Source, e.Digest, e.Platforms = ref, a.index.Digest.String(), a.platforms()
		return nil
	})
}

func sameConfig(a, b ArtifactConfig) bool {
	return a.Name == b.Name && a.Version == b.Version && slices.Equal(a.Backends, b.Backends) && slices.Equal(a.Meshes, b.Meshes) &&
		slices.Equal(a.InputKinds, b.InputKinds) && slices.Equal(a.OutputKinds, b.OutputKinds)
}

// InstallFromLock installs, for this platform, exactly the plugins the
// lock file at lockPath (dir's own when empty) names, as `terraform init`
// does: each from its source pinned to the locked index digest, with the
// signature checked as [InstallOCI] does, every platform's binary sha256
// compared with the lock's and the binary checked against this platform's.
// A plugin not installed from a registry must already be in dir with its
// locked sha256. Nothing in dir changes unless every plugin verifies; then
// the binaries are put in place and the lock written with this platform's
// sums.
func InstallFromLock(ctx context.Context, dir, lockPath string, opts OCIOptions) ([]Entry, error) {
	if lockPath == "" {
		lockPath = filepath.Join(dir, LockFile)
	}
	entries, err := readLock(lockPath)
	if err != nil {
		return nil, err
	}
	keys, err := trustedKeys(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("install from %s: trusted keys: %w", lockPath, err)
	}
	platform := opts.platform()
	staged := map[string]string{} // path in dir → temporary file
	defer func() {
		for _, tmp := range staged {
			os.Remove(tmp)
		}
	}()
	for i, e := range entries {
		if e.Source == "" {
			if err := checkSum(e.Name, filepath.Join(dir, e.Path), e.SHA256); err != nil {
				return nil, fmt.Errorf("install from %s: %w (it was not installed from a registry, so it cannot be fetched)", lockPath, err)
			}
			continue
		}
		want, ok := e.Platforms[platform]
		if !ok {
			return nil, fmt.Errorf("install from %s: plugin %q: the lock has no binary for %s (it has %s)", lockPath, e.Name, platform, strings.Join(slices.Sorted(maps.Keys(e.Platforms)), ", "))
		}
		loc, err := parseLocation(e.Source)
		if err != nil {
			return nil, fmt.Errorf("install from %s: plugin %q: %w", lockPath, e.Name, err)
		}
		a, err := resolve(ctx, loc.withDigest(e.Digest), opts, keys)
		if err != nil {
			return nil, fmt.Errorf("install from %s: plugin %q: %w", lockPath, e.Name, err)
		}
		got := a.platforms()
		for _, p := range slices.Sorted(maps.Keys(mergeKeys(got, e.Platforms))) {
			if got[p] != e.Platforms[p] {
				return nil, fmt.Errorf("install from %s: plugin %q: %w: the lock has sha256 %q for %s, index %s has %q", lockPath, e.Name, ErrDigest, e.Platforms[p], p, a.index.Digest, got[p])
			}
		}
		tmp, sum, err := a.fetchBinary(ctx, dir, platform)
		if err != nil {
			return nil, fmt.Errorf("install from %s: plugin %q: %w", lockPath, e.Name, err)
		}
		e.Path = BinaryPrefix + e.Name
		staged[e.Path] = tmp
		if sum != want {
			return nil, fmt.Errorf("install from %s: plugin %q: %w: binary for %s has sha256 %s, the lock %s", lockPath, e.Name, ErrDigest, platform, sum, want)
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return nil, fmt.Errorf("install from %s: %w", lockPath, err)
		}
		e.SHA256 = want
		entries[i] = e
	}
	for path, tmp := range staged {
		if err := os.Rename(tmp, filepath.Join(dir, path)); err != nil {
			return nil, fmt.Errorf("install from %s: %w", lockPath, err)
		}
		delete(staged, path)
	}
	if err := writeLock(dir, entries); err != nil {
		return nil, err
	}
	return entries, nil
}

func mergeKeys(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// readLock reads a lock file at any path.
func readLock(path string) ([]Entry, error) {
	dir, name := filepath.Split(path)
	if name == LockFile {
		return List(dir)
	}
	tmp, err := os.MkdirTemp("", "meshrelay-lock-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read plugin lock file: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, LockFile), data, 0o644); err != nil {
		return nil, err
	}
	return List(tmp)
}

// Pull copies the plugin artifact ref names, every platform and its
// signature, into the OCI layout directory dir, tagged with ref's tag (or
// the index's version when ref is a digest), for `oci-layout://DIR:TAG`.
// The signature is checked as [InstallOCI] checks it, with opts.VerifyKeys.
func Pull(ctx context.Context, ref, dir string, opts OCIOptions) (ocispec.Descriptor, error) {
	loc, err := parseLocation(ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	a, err := resolve(ctx, loc, opts, opts.VerifyKeys)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	tag := loc.reference
	if _, err := digest.Parse(tag); err == nil {
		tag = a.config.Version
	}
	dst, err := location{layoutDir: dir, raw: SchemeOCILayout + dir}.target(ctx, opts.Registry)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := copyArtifact(ctx, a.src, a.index, dst, tag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	return a.index, nil
}

// Copy copies the plugin artifact at src (typically an OCI layout) to dst
// (typically a private registry), with its signature when it has one,
// verifying nothing: install verifies.
func Copy(ctx context.Context, src, dst string, opts RegistryOptions) (ocispec.Descriptor, error) {
	from, err := parseLocation(src)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	to, err := parseLocation(dst)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if from.reference == "" || to.reference == "" {
		return ocispec.Descriptor{}, fmt.Errorf("copy %s to %s: both need a tag", src, dst)
	}
	s, err := from.source(ctx, opts)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	d, err := to.target(ctx, opts)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc, err := s.Resolve(ctx, from.reference)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("copy %s: %w", src, err)
	}
	if err := copyArtifact(ctx, s, desc, d, to.reference); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return desc, nil
}

// copyArtifact copies an index's graph, tagged tag, and its signature.
func copyArtifact(ctx context.Context, src oras.ReadOnlyTarget, index ocispec.Descriptor, dst oras.Target, tag string) error {
	if err := oras.CopyGraph(ctx, src, dst, index, oras.DefaultCopyGraphOptions); err != nil {
		return err
	}
	if err := dst.Tag(ctx, index, tag); err != nil {
		return err
	}
	sigTag := signatureTag(index.Digest)
	sig, err := src.Resolve(ctx, sigTag)
	if errors.Is(err, errdef.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	if err := oras.CopyGraph(ctx, src, dst, sig, oras.DefaultCopyGraphOptions); err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	return dst.Tag(ctx, sig, sigTag)
}
