package restateid

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mr-tron/base58"
)

// TestKeyPair: the PEM holds a PKCS#8 Ed25519 key whose public half is the
// returned public key.
func TestKeyPair(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identity.pem")
	pub, err := WriteKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	block, _ := pem.Decode(raw)
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	b, err := base58.Decode(strings.TrimPrefix(pub, "publickeyv1_"))
	if err != nil || !strings.HasPrefix(pub, "publickeyv1_") {
		t.Fatalf("public key %q: %v", pub, err)
	}
	if !key.(ed25519.PrivateKey).Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(b)) {
		t.Fatal("the public key does not belong to the private key")
	}
	if pubFile, _ := os.ReadFile(path + ".pub"); strings.TrimSpace(string(pubFile)) != pub {
		t.Fatalf("%s.pub holds %q, want %q", path, pubFile, pub)
	}
	// Again: the key is kept.
	again, err := WriteKeyFile(path)
	if err != nil || again != pub {
		t.Fatalf("second WriteKeyFile = %q, %v; want the same key %q", again, err, pub)
	}
}
