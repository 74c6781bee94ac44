// Package tlstest makes certificate authorities and certificates for
// tests, with crypto/x509: nothing is read from disk or the network.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // the CA certificate
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// NewCA returns a fresh CA valid for an hour either side of now.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is an issued certificate.
type Leaf struct {
	CertPEM, KeyPEM []byte
	Serial          int64
}

// Issue returns a certificate for 127.0.0.1 and localhost, usable by a
// server and by a client, with a serial number no other has.
func (ca *CA) Issue(t testing.TB) Leaf {
	t.Helper()
	key := newKey(t)
	n := serial.Add(1)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Leaf{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), n}
}

// Pair returns the leaf as a tls.Certificate.
func (l Leaf) Pair(t testing.TB) tls.Certificate {
	t.Helper()
	p, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Write writes the leaf's certificate and key to the two paths.
func (l Leaf) Write(t testing.TB, certPath, keyPath string) {
	t.Helper()
	WriteFile(t, certPath, l.CertPEM)
	WriteFile(t, keyPath, l.KeyPEM)
}

// WriteFile writes b to path (mode 0600), failing the test on error.
func WriteFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
