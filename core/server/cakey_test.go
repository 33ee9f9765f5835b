package server

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store/memory"
)

// withoutCAKeySecret starts a server with no CA key encryption key given,
// as `meshrelay server` without --ca-key-encryption-key-file does.
func withoutCAKeySecret(t *testing.T) serverOption {
	t.Setenv(CAKeyEncryptionKeyEnv, "")
	return func(o *Options) { o.CAKeyEncryptionKey = "" }
}

// storedCAKey returns the store's sealed CA key and its certificates.
func storedCAKey(t *testing.T, st *memory.Store) (certPEM, sealed []byte) {
	t.Helper()
	certPEM, sealed, err := st.GetCA(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, sealed
}

// Without a secret given, the CA key is sealed with one the server
// generates in its data directory, never with one derived from the admin
// token; a replica with a copy of it shares the CA, one without refuses to
// start.
func TestCAKeySealedWithItsOwnSecret(t *testing.T) {
	st := memory.New()
	dir := t.TempDir()
	ts := startServer(t, st, dir, withoutCAKeySecret(t))
	path := filepath.Join(dir, caKeyEncryptionKeyName)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no generated CA key encryption key: %v", err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, info.Mode().Perm())
	}
	secret, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, sealed := storedCAKey(t, st)
	if _, err := openCAKey(sealKey{secret: pki.HashToken(ts.adminToken())}, certPEM, sealed); err == nil {
		t.Fatal("the admin token opens the CA key in the store")
	}
	if _, err := openCAKey(sealKey{secret: bytes.TrimSpace(secret)}, certPEM, sealed); err != nil {
		t.Fatalf("the generated secret does not open the CA key in the store: %v", err)
	}

	// A replica with its own data directory, the same admin token and a
	// copy of the secret shares the CA; without the copy it refuses.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, caKeyEncryptionKeyName), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	withToken := func(o *Options) { o.AdminTokenFile = ts.AdminTokenPath() }
	ts2 := startServer(t, st.Replica("r2"), other, withoutCAKeySecret(t), withToken)
	if !bytes.Equal(ts.CABundle(), ts2.CABundle()) {
		t.Fatal("a replica with the same secret did not load the shared CA")
	}
	opts := DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir, opts.AdminTokenFile = "127.0.0.1:0", "", t.TempDir(), ts.AdminTokenPath()
	if _, err := New(context.Background(), opts, Deps{Store: st.Replica("r3")}); !errors.Is(err, errWrongCAKeySecret) {
		t.Fatalf("New with the admin token but not the secret = %v, want %v", err, errWrongCAKeySecret)
	}
}

// A CA key an earlier release sealed with the secret derived from the admin
// token is loaded and sealed again with the CA key encryption key.
func TestLegacyCAKeyIsResealed(t *testing.T) {
	st := memory.New()
	dir := t.TempDir()
	tok, err := pki.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "admin-token"), []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	legacy := sealKey{secret: pki.HashToken(tok)}
	ca, err := pki.GenerateCA("old", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pemData, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := splitPEM(pemData)
	sealed, err := sealCAKey(legacy, certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutCA(context.Background(), certPEM, sealed); err != nil {
		t.Fatal(err)
	}

	ts := startServer(t, st, dir)
	if !bytes.Equal(ts.CABundle(), certPEM) {
		t.Fatal("the server did not load the stored CA")
	}
	_, resealed := storedCAKey(t, st)
	if _, err := openCAKey(legacy, certPEM, resealed); err == nil {
		t.Fatal("the CA key in the store still opens with the admin token's secret")
	}
	if _, err := openCAKey(sealKey{secret: []byte("test-ca-key-encryption-key")}, certPEM, resealed); err != nil {
		t.Fatalf("the CA key in the store does not open with the CA key encryption key: %v", err)
	}

	// Mesh roots sealed the old way still open: the legacy secret opens,
	// never seals.
	root, err := openCAKey(sealKey{secret: []byte("test-ca-key-encryption-key"), legacy: pki.HashToken(tok)}, certPEM, sealed)
	if err != nil || !bytes.Equal(root, keyPEM) {
		t.Fatalf("openCAKey of a key sealed with the legacy secret = %v", err)
	}
}

// A CA key in plain text in the store, which anyone able to write the store
// could have put there, is refused; only the replica whose data directory
// holds the same CA takes it, and stores it sealed.
func TestPlainCAKeyInStore(t *testing.T) {
	ca, err := pki.GenerateCA("planted", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pemData, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := splitPEM(pemData)

	t.Run("refused", func(t *testing.T) {
		st := memory.New()
		if err := st.PutCA(context.Background(), certPEM, keyPEM); err != nil {
			t.Fatal(err)
		}
		opts := DefaultOptions()
		opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", t.TempDir()
		opts.CAKeyEncryptionKey = "test-ca-key-encryption-key"
		if _, err := New(context.Background(), opts, Deps{Store: st}); !errors.Is(err, errPlainCAKey) {
			t.Fatalf("New with a plain CA key in the store = %v, want %v", err, errPlainCAKey)
		}
		if _, stored := storedCAKey(t, st); !bytes.Equal(stored, keyPEM) {
			t.Error("a refused plain CA key was rewritten in the store")
		}
	})

	t.Run("the data directory holds it", func(t *testing.T) {
		st := memory.New()
		if err := st.PutCA(context.Background(), certPEM, keyPEM); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := ca.Save(filepath.Join(dir, "ca")); err != nil {
			t.Fatal(err)
		}
		ts := startServer(t, st, dir)
		if !bytes.Equal(ts.CABundle(), certPEM) {
			t.Fatal("the server did not load the stored CA")
		}
		if _, stored := storedCAKey(t, st); strings.Contains(string(stored), "PRIVATE KEY") {
			t.Fatal("the CA key is still in plain text in the store")
		}
	})
}
