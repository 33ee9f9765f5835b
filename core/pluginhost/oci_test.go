package pluginhost

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

// tamperBlobs is the in-process registry's blob store, which can be made
// to serve other bytes for a digest, as a compromised store would.
type tamperBlobs struct {
	inner registry.BlobHandler
	mu    sync.Mutex
	bad   map[string][]byte
}

// tamper makes the repository serve data for digest.
func (b *tamperBlobs) tamper(repo, digest string, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bad[repo+"@"+digest] = data
}

func (b *tamperBlobs) Get(ctx context.Context, repo string, h v1.Hash) (io.ReadCloser, error) {
	b.mu.Lock()
	var data []byte
	ok := false
	for k, v := range b.bad {
		r, d, _ := strings.Cut(k, "@")
		if d == h.String() && strings.HasSuffix(repo, r) {
			data, ok = v, true
		}
	}
	b.mu.Unlock()
	if ok {
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	return b.inner.Get(ctx, repo, h)
}

func (b *tamperBlobs) Stat(ctx context.Context, repo string, h v1.Hash) (int64, error) {
	return b.inner.(registry.BlobStatHandler).Stat(ctx, repo, h)
}

func (b *tamperBlobs) Put(ctx context.Context, repo string, h v1.Hash, rc io.ReadCloser) error {
	return b.inner.(registry.BlobPutHandler).Put(ctx, repo, h, rc)
}

// startRegistry starts go-containerregistry's registry on a loopback port
// and returns its host:port and its blob store.
func startRegistry(t *testing.T) (string, *tamperBlobs) {
	t.Helper()
	blobs := &tamperBlobs{inner: registry.NewInMemoryBlobHandler(), bad: map[string][]byte{}}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(blobs)))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), blobs
}

// otherPlatform is a platform the tests publish for but never run.
func otherPlatform() string {
	if HostPlatform() == "linux/arm64" {
		return "linux/amd64"
	}
	return "linux/arm64"
}

// releaseOf returns the test plugin's binaries for this platform and for
// another one (a stand-in: it is only ever hashed).
func releaseOf(t *testing.T, name string) map[string]string {
	t.Helper()
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n# "+otherPlatform()+" build of "+name+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return map[string]string{HostPlatform(): pluginBinary(t, "sdk", name), otherPlatform(): other}
}

type testKey struct {
	private PrivateKey
	public  PublicKey
	pem     []byte
}

func newTestKey(t *testing.T) testKey {
	t.Helper()
	priv, pub, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := ParsePublicKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{private: k, public: pk[0], pem: pub}
}

var loopback = RegistryOptions{PlainHTTP: true}

// dirState returns every file in dir with its contents' sha256.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		sum, err := fileSHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = sum
	}
	return out
}

// TestOCIPushInstallLock publishes a signed plugin for two platforms to a
// real registry, installs it for this one, runs it, and installs it again
// from the lock alone into a clean directory; then carries it through an
// OCI layout (air-gapped) into a second registry and installs it there.
func TestOCIPushInstallLock(t *testing.T) {
	ctx := context.Background()
	reg, _ := startRegistry(t)
	key := newTestKey(t)
	ref := "oci://" + reg + "/plugins/good:1.0.0"
	bins := releaseOf(t, "good")
	index, err := Push(ctx, ref, bins, PushOptions{Registry: loopback, SignKey: key.private})
	if err != nil {
		t.Fatalf("Push = %v", err)
	}
	if index.ArtifactType != ArtifactType {
		t.Errorf("pushed index artifact type %q, want %q", index.ArtifactType, ArtifactType)
	}

	dir := t.TempDir()
	opts := OCIOptions{Registry: loopback, VerifyKeys: []PublicKey{key.public}}
	e, err := InstallOCI(ctx, dir, ref, opts)
	if err != nil {
		t.Fatalf("InstallOCI = %v", err)
	}
	wantPlatforms := map[string]string{}
	for p, path := range bins {
		sum, err := fileSHA256(path)
		if err != nil {
			t.Fatal(err)
		}
		wantPlatforms[p] = sum
	}
	if diff := cmp.Diff(wantPlatforms, e.Platforms); diff != "" {
		t.Errorf("lock entry's platforms (-want +got):\n%s", diff)
	}
	if e.Name != "good" || e.Source != ref || e.Digest != index.Digest.String() || e.SHA256 != wantPlatforms[HostPlatform()] {
		t.Errorf("InstallOCI = %+v, want good from %s at %s with sha256 %s", e, ref, index.Digest, wantPlatforms[HostPlatform()])
	}
	works(t, mustPlugin(t, newHost(t, dir, testOptions(), nil), "good"))

	// A clean directory, the lock alone (as a ConfigMap would hold it), and
	// the key from the directory's trusted-keys file.
	lock := filepath.Join(t.TempDir(), "plugins.lock")
	data, err := os.ReadFile(filepath.Join(dir, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, data, 0o644); err != nil {
		t.Fatal(err)
	}
	clean := t.TempDir()
	if err := os.WriteFile(filepath.Join(clean, TrustedKeysFile), key.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := InstallFromLock(ctx, clean, lock, OCIOptions{Registry: loopback})
	if err != nil {
		t.Fatalf("InstallFromLock = %v", err)
	}
	if len(entries) != 1 || entries[0].SHA256 != e.SHA256 || entries[0].Digest != e.Digest {
		t.Errorf("InstallFromLock = %+v, want %+v", entries, e)
	}
	if err := Verify(clean); err != nil {
		t.Errorf("Verify after InstallFromLock = %v", err)
	}
	works(t, mustPlugin(t, newHost(t, clean, testOptions(), nil), "good"))

	t.Run("air-gapped", func(t *testing.T) {
		layout := filepath.Join(t.TempDir(), "layout")
		if _, err := Pull(ctx, ref, layout, opts); err != nil {
			t.Fatalf("Pull = %v", err)
		}
		fromLayout := t.TempDir()
		e, err := InstallOCI(ctx, fromLayout, SchemeOCILayout+layout+":1.0.0", opts)
		if err != nil || e.Digest != index.Digest.String() {
			t.Fatalf("InstallOCI(layout) = %+v, %v", e, err)
		}
		private, _ := startRegistry(t)
		mirror := "oci://" + private + "/mirror/good:1.0.0"
		if _, err := Copy(ctx, SchemeOCILayout+layout+":1.0.0", mirror, loopback); err != nil {
			t.Fatalf("Copy(layout, registry) = %v", err)
		}
		e, err = InstallOCI(ctx, t.TempDir(), mirror, opts)
		if err != nil || e.Digest != index.Digest.String() {
			t.Fatalf("InstallOCI(mirror) = %+v, %v", e, err)
		}
	})

	t.Run("plain HTTP only to loopback", func(t *testing.T) {
		_, err := InstallOCI(ctx, t.TempDir(), "oci://registry.example.com/plugins/good:1.0.0", opts)
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("InstallOCI over plain HTTP to a remote host = %v, want refused", err)
		}
	})
}

// TestOCIRefusals installs artifacts that must be refused into a directory
// holding a good install, and checks each error names what failed and the
// directory is left as it was.
func TestOCIRefusals(t *testing.T) {
	ctx := context.Background()
	reg, blobs := startRegistry(t)
	key, other := newTestKey(t), newTestKey(t)
	good := "oci://" + reg + "/plugins/good:1.0.0"
	index, err := Push(ctx, good, releaseOf(t, "good"), PushOptions{Registry: loopback, SignKey: key.private})
	if err != nil {
		t.Fatalf("Push = %v", err)
	}
	opts := OCIOptions{Registry: loopback, VerifyKeys: []PublicKey{key.public}}

	unsigned := "oci://" + reg + "/plugins/unsigned:1.0.0"
	if _, err := Push(ctx, unsigned, releaseOf(t, "good"), PushOptions{Registry: loopback}); err != nil {
		t.Fatal(err)
	}

	// A tampered index: another index under a new tag, with the good
	// index's signature copied beside it.
	repo, err := remote.NewRepository(reg + "/plugins/good")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	raw, err := content.FetchAll(ctx, repo, index)
	if err != nil {
		t.Fatal(err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	idx.Annotations[ocispec.AnnotationVersion] = "1.0.1"
	raw, err = json.Marshal(idx)
	if err != nil {
		t.Fatal(err)
	}
	evil := content.NewDescriptorFromBytes(ocispec.MediaTypeImageIndex, raw)
	if err := repo.PushReference(ctx, evil, bytes.NewReader(raw), "evil"); err != nil {
		t.Fatal(err)
	}
	sig, err := repo.Resolve(ctx, signatureTag(index.Digest))
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Tag(ctx, sig, signatureTag(evil.Digest)); err != nil {
		t.Fatal(err)
	}

	// A tampered layer: the registry's store serves other bytes, of the
	// same length, for this platform's binary.
	tamperedRef := "oci://" + reg + "/plugins/tampered:1.0.0"
	tbins := releaseOf(t, "good")
	if _, err := Push(ctx, tamperedRef, tbins, PushOptions{Registry: loopback, SignKey: key.private}); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(tbins[HostPlatform()])
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := fileSHA256(tbins[HostPlatform()])
	bin[len(bin)/2] ^= 0xff
	blobs.tamper("plugins/tampered", "sha256:"+sum, bin)

	// A tampered index in an OCI layout: its bytes on disk changed.
	layout := filepath.Join(t.TempDir(), "layout")
	if _, err := Pull(ctx, good, layout, opts); err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(layout, "blobs", "sha256", index.Digest.Encoded())
	if err := os.WriteFile(blob, bytes.Replace(mustRead(t, blob), []byte("1.0.0"), []byte("6.6.6"), 1), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		ref     string
		opts    OCIOptions
		fromLoc bool
		want    error
		names   []string
	}{
		"unsigned":         {ref: unsigned, opts: opts, want: ErrUnsigned, names: []string{"not signed", "--insecure-skip-verify"}},
		"wrong key":        {ref: good, opts: OCIOptions{Registry: loopback, VerifyKeys: []PublicKey{other.public}}, want: ErrSignature, names: []string{other.public.Fingerprint}},
		"no trusted key":   {ref: good, opts: OCIOptions{Registry: loopback}, want: ErrSignature, names: []string{"no key is trusted"}},
		"tampered index":   {ref: "oci://" + reg + "/plugins/good:evil", opts: opts, want: ErrSignature, names: []string{"index " + evil.Digest.String(), "signed index " + index.Digest.String()}},
		"tampered layer":   {ref: tamperedRef, opts: opts, want: ErrDigest, names: []string{"layer sha256:" + sum, HostPlatform()}},
		"tampered layout":  {ref: SchemeOCILayout + layout + ":1.0.0", opts: opts, want: ErrDigest, names: []string{"OCI layout", "Index", "mismatched digest"}},
		"lock digest":      {fromLoc: true, opts: opts, want: ErrDigest, names: []string{"lock", HostPlatform(), strings.Repeat("ab", 32)}},
		"lock for nothing": {fromLoc: true, opts: OCIOptions{Registry: loopback, VerifyKeys: []PublicKey{key.public}, Platform: "plan9/mips"}, names: []string{"no binary for plan9/mips"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			e, err := InstallOCI(ctx, dir, good, opts)
			if err != nil {
				t.Fatal(err)
			}
			if tc.fromLoc {
				e.Platforms[HostPlatform()] = strings.Repeat("ab", 32)
				if err := writeLock(dir, []Entry{e}); err != nil {
					t.Fatal(err)
				}
			}
			before := dirState(t, dir)
			if tc.fromLoc {
				_, err = InstallFromLock(ctx, dir, "", tc.opts)
			} else {
				_, err = InstallOCI(ctx, dir, tc.ref, tc.opts)
			}
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("install = %v, want %v", err, tc.want)
			}
			t.Logf("refused: %v", err)
			for _, s := range tc.names {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if diff := cmp.Diff(before, dirState(t, dir)); diff != "" {
				t.Errorf("the refused install changed the plugin directory (-before +after):\n%s", diff)
			}
		})
	}

	t.Run("insecure-skip-verify", func(t *testing.T) {
		e, err := InstallOCI(ctx, t.TempDir(), unsigned, OCIOptions{Registry: loopback, InsecureSkipVerify: true})
		if err != nil || e.Name != "good" {
			t.Errorf("InstallOCI(unsigned, --insecure-skip-verify) = %+v, %v", e, err)
		}
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSwappedBinaryRefusedAtExec swaps a running plugin's installed
// binary for another plugin and kills the process: the restart executes
// the file through go-plugin's SecureConfig, which hashes it against the
// locked sha256 and refuses it, naming both sums. The other plugin never
// runs.
func TestSwappedBinaryRefusedAtExec(t *testing.T) {
	dir := t.TempDir()
	e, err := Install(dir, pluginBinary(t, "sdk", "good"), "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, dir, testOptions(), nil)
	p := mustPlugin(t, h, "good")
	works(t, p)
	pid := p.Pid()
	// A running executable cannot be written in place: the other binary
	// is renamed over it.
	path := filepath.Join(dir, e.Path)
	if err := os.WriteFile(path+".new", mustRead(t, pluginBinary(t, "sdk", "other")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	swapped, err := fileSHA256(path)
	if err != nil || swapped == e.SHA256 {
		t.Fatalf("the binary was not swapped: sha256 %s, %v", swapped, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	// The first call after the kill may only find the process gone; a
	// later one starts it again.
	for range 3 {
		if _, err = p.Translate(context.Background(), view("east")); err == nil {
			t.Fatal("Translate succeeded: the swapped binary ran")
		}
		if errors.Is(err, ErrChecksum) {
			break
		}
	}
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), e.SHA256) || !strings.Contains(err.Error(), swapped) {
		t.Fatalf("Translate with a swapped binary = %v, want ErrChecksum naming %s and %s", err, e.SHA256, swapped)
	}
	if p.Pid() != 0 {
		t.Errorf("a process runs (pid %d) after the swapped binary was refused", p.Pid())
	}
	t.Logf("refused: %v", err)
}

// TestReleaseBinaries reads platforms from make release's file names.
func TestReleaseBinaries(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"meshrelay-plugin-acme-linux-amd64", "meshrelay-plugin-acme-darwin-arm64", "meshrelay-plugin-acme-windows-amd64.exe", "README"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReleaseBinaries([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"darwin/arm64", "linux/amd64", "windows/amd64"}
	if diff := cmp.Diff(want, sortedKeys(got)); diff != "" {
		t.Errorf("ReleaseBinaries platforms (-want +got):\n%s", diff)
	}
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return sortedSet(out)
}

// TestRegistryCredentialsFromDockerConfig pushes to and installs from a
// registry that wants a password, with the credentials docker login
// writes ($DOCKER_CONFIG/config.json); without them it is refused.
func TestRegistryCredentialsFromDockerConfig(t *testing.T) {
	ctx := context.Background()
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "acme" || pass != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://")
	ref := "oci://" + reg + "/plugins/good:1.0.0"
	bins := releaseOf(t, "good")

	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("REGISTRY_AUTH_FILE", "")
	if _, err := Push(ctx, ref, bins, PushOptions{Registry: loopback}); err == nil || !strings.Contains(err.Error(), "credential") {
		t.Fatalf("Push without credentials = %v, want refused for want of a credential", err)
	}
	cfg := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("acme:s3cret"))
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"auths":{"`+reg+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", cfg)
	if _, err := Push(ctx, ref, bins, PushOptions{Registry: loopback}); err != nil {
		t.Fatalf("Push with the Docker config's credentials = %v", err)
	}
	if _, err := InstallOCI(ctx, t.TempDir(), ref, OCIOptions{Registry: loopback, InsecureSkipVerify: true}); err != nil {
		t.Fatalf("InstallOCI with the Docker config's credentials = %v", err)
	}
	// podman's and skopeo's auth file, when the Docker config has nothing.
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("REGISTRY_AUTH_FILE", filepath.Join(cfg, "config.json"))
	if _, err := InstallOCI(ctx, t.TempDir(), ref, OCIOptions{Registry: loopback, InsecureSkipVerify: true}); err != nil {
		t.Fatalf("InstallOCI with $REGISTRY_AUTH_FILE's credentials = %v", err)
	}
}
