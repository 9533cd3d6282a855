// Package restateid makes the key pairs that restate-server signs its
// requests to a service endpoint with (Restate's request identity, scheme
// v1): an Ed25519 private key as a PKCS#8 PEM file for restate-server, and
// the public key as the endpoint takes it, "publickeyv1_" followed by the
// key's 32 bytes in base58.
package restateid

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"

	"github.com/mr-tron/base58"
)

// publicKeyPrefix marks a v1 request identity public key.
const publicKeyPrefix = "publickeyv1_"

// Generate returns a new private key as PEM and its public key in the form
// the endpoint's WithIdentityV1 takes.
func Generate() (privatePEM []byte, publicKey string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("generate ed25519 key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, "", fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), PublicKey(pub), nil
}

// PublicKey returns pub in the form the endpoint's WithIdentityV1 takes.
func PublicKey(pub ed25519.PublicKey) string { return publicKeyPrefix + base58.Encode(pub) }

// WriteKeyFile generates a key pair, writes the private key to path
// (readable by its owner only) and its public key to path + ".pub", and
// returns the public key. A key already at path is kept: its public key is
// written and returned, so running it again changes nothing.
func WriteKeyFile(path string) (publicKey string, err error) {
	if raw, err := os.ReadFile(path); err == nil {
		publicKey, err = publicKeyOf(raw)
		if err != nil {
			return "", fmt.Errorf("existing key %s: %w", path, err)
		}
	} else {
		var privatePEM []byte
		privatePEM, publicKey, err = Generate()
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(path, privatePEM, 0o600); err != nil {
			return "", fmt.Errorf("write private key: %w", err)
		}
	}
	if err := os.WriteFile(path+".pub", []byte(publicKey+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write public key: %w", err)
	}
	return publicKey, nil
}

// publicKeyOf returns the public key of a PEM private key.
func publicKeyOf(privatePEM []byte) (string, error) {
	block, _ := pem.Decode(privatePEM)
	if block == nil {
		return "", fmt.Errorf("not a PEM file")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return "", err
	}
	priv, ok := key.(ed25519.PrivateKey)
	if !ok {
		return "", fmt.Errorf("not an Ed25519 key")
	}
	return PublicKey(priv.Public().(ed25519.PublicKey)), nil
}
