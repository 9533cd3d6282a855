package testserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority for tests of TLS.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate.
	PEM []byte
}

// NewCA returns a new certificate authority, valid for an hour.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue writes a certificate of serial for 127.0.0.1 (a server's, or a
// client's) and its key to dir, as cert.pem and key.pem, each written
// aside and renamed into place, and returns their paths.
func (ca *CA) Issue(t testing.TB, dir string, serial int64, client bool) (certFile, keyFile string) {
	t.Helper()
	return ca.IssueValid(t, dir, serial, client, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// IssueValid is Issue for a certificate valid from notBefore to notAfter:
// one that expired, or is not valid yet.
func (ca *CA) IssueValid(t testing.TB, dir string, serial int64, client bool, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	return ca.issue(t, dir, serial, notBefore, notAfter, usage)
}

// IssueServerAndClient is Issue for one certificate a process presents
// both as a server and as a client (as Envoy Gateway's rate limit
// deployment does: to Envoy, and to the xDS server).
func (ca *CA) IssueServerAndClient(t testing.TB, dir string, serial int64) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, dir, serial, time.Now().Add(-time.Hour), time.Now().Add(time.Hour),
		x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, dir string, serial int64, notBefore, notAfter time.Time, usages ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: notBefore, NotAfter: notAfter, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: usages, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for name, data := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(name+".tmp", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(name+".tmp", name); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// ServerFiles issues a server certificate for 127.0.0.1 in dir (see Issue)
// and writes the CA's certificate beside it as ca.pem: the three files a
// server with TLS is given.
func (ca *CA) ServerFiles(t testing.TB, dir string) (certFile, keyFile, caFile string) {
	t.Helper()
	certFile, keyFile = ca.Issue(t, dir, 1, false)
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, caFile
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}
