package tlsfiles

import (
	"crypto/tls"
	"path/filepath"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/server/tlsfiles/tlstest"
)

// handshake connects to l's address trusting ca (with client, if any)
// and returns the serial number the server presented, or the error.
func handshake(addr string, ca *tlstest.CA, client *tls.Certificate) (int64, error) {
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	// Under TLS 1.3 a refused client certificate shows on the first read.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return 0, err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// serve accepts on a loopback TLS listener with cfg, writing one byte to
// each connection, until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte{1})
			_ = c.Close()
		}
	}()
	return l.Addr().String()
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	files := Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	l1 := ca.Issue(t)
	l1.Write(t, files.Cert, files.Key)
	s1 := l1.Serial
	var reloads []error
	src, err := New(files, nil, func(err error) { reloads = append(reloads, err) })
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	src.now = func() time.Time { return clock }
	addr := serve(t, src.Config())
	if got, err := handshake(addr, ca, nil); err != nil || got != s1 {
		t.Fatalf("first handshake: serial %d %v, want %d", got, err, s1)
	}

	// A certificate written before its key: the old pair stays in use.
	l2 := ca.Issue(t)
	s2 := l2.Serial
	tlstest.WriteFile(t, files.Cert, l2.CertPEM)
	clock = clock.Add(CheckInterval)
	if got, err := handshake(addr, ca, nil); err != nil || got != s1 {
		t.Fatalf("half rotated: serial %d %v, want the old %d", got, err, s1)
	}
	if len(reloads) != 1 || reloads[0] == nil {
		t.Fatalf("reloads %v, want one failure", reloads)
	}
	tlstest.WriteFile(t, files.Key, l2.KeyPEM)
	if got, _ := handshake(addr, ca, nil); got != s1 {
		t.Fatalf("within the interval: serial %d, want the old %d", got, s1)
	}
	clock = clock.Add(CheckInterval)
	if got, err := handshake(addr, ca, nil); err != nil || got != s2 {
		t.Fatalf("rotated: serial %d %v, want %d", got, err, s2)
	}
	if len(reloads) != 2 || reloads[1] != nil {
		t.Fatalf("reloads %v, want a failure then a success", reloads)
	}
}

func TestMutual(t *testing.T) {
	dir := t.TempDir()
	ca, clientCA, otherCA := tlstest.NewCA(t), tlstest.NewCA(t), tlstest.NewCA(t)
	files := Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), ClientCA: filepath.Join(dir, "ca.crt")}
	leaf := ca.Issue(t)
	leaf.Write(t, files.Cert, files.Key)
	s := leaf.Serial
	tlstest.WriteFile(t, files.ClientCA, clientCA.PEM)
	src, err := New(files, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, src.Config())
	pair := func(ca *tlstest.CA) *tls.Certificate {
		p := ca.Issue(t).Pair(t)
		return &p
	}
	if got, err := handshake(addr, ca, pair(clientCA)); err != nil || got != s {
		t.Errorf("with a client certificate: %d %v", got, err)
	}
	if _, err := handshake(addr, ca, nil); err == nil {
		t.Error("without a client certificate: handshake succeeded")
	}
	if _, err := handshake(addr, ca, pair(otherCA)); err == nil {
		t.Error("with a client certificate of another CA: handshake succeeded")
	}
	if _, err := handshake(addr, otherCA, pair(clientCA)); err == nil {
		t.Error("trusting the wrong CA: handshake succeeded")
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	ca.Issue(t).Write(t, filepath.Join(dir, "c"), filepath.Join(dir, "k"))
	tlstest.WriteFile(t, filepath.Join(dir, "junk"), []byte("not pem"))
	cases := []Files{
		{Cert: filepath.Join(dir, "c")},
		{Cert: filepath.Join(dir, "c"), Key: filepath.Join(dir, "missing")},
		{Cert: filepath.Join(dir, "c"), Key: filepath.Join(dir, "junk")},
		{Cert: filepath.Join(dir, "c"), Key: filepath.Join(dir, "k"), ClientCA: filepath.Join(dir, "junk")},
	}
	for _, f := range cases {
		if _, err := New(f, nil, nil); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}
