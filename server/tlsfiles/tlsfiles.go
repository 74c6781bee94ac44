// Package tlsfiles serves TLS from a certificate, key and optional client
// CA held in files that may change while the server runs: tools such as
// cert-manager rotate them in place, and the next handshake after a change
// uses the new files, with no restart.
//
// The files are checked at most once per CheckInterval, on a handshake:
// they are read (a few kilobytes) and their digest compared with the last
// one; only a change parses them. Contents, not modification times, are
// compared: a rewrite of the same size within one kernel clock tick keeps
// its mtime. This is polling without a goroutine, so there is nothing to
// start or stop. fsnotify is not used:
// a Kubernetes secret volume replaces files by swapping a symlink to a
// directory, which a watch on the file's path misses unless the watcher
// re-arms on the parent directory, and a stat per interval is cheaper than
// that bookkeeping. A change that does not load (a certificate written
// before its key) keeps the previous files in use and is retried at the
// next check.
package tlsfiles

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// CheckInterval is the least time between two checks of the files.
const CheckInterval = time.Second

// ErrNoCA is returned when a client CA file holds no PEM certificate.
var ErrNoCA = errors.New("no PEM certificate in the client CA file")

// Files names the PEM files of one listener.
type Files struct {
	Cert string // server certificate chain
	Key  string // its private key
	// ClientCA, when set, turns on mutual TLS: a client must present a
	// certificate that this CA bundle verifies.
	ClientCA string
}

// Source hands crypto/tls the current configuration built from Files.
type Source struct {
	files      Files
	nextProtos []string
	onReload   func(error)
	now        func() time.Time

	mu      sync.Mutex
	checked time.Time
	digest  [sha256.Size]byte
	current *tls.Config
}

// New loads files and returns a Source. nextProtos is the ALPN list the
// server offers ("h2" for gRPC). onReload, if not nil, is told of each
// reload after the first: nil when the new files are in use, else why
// they were not.
func New(files Files, nextProtos []string, onReload func(error)) (*Source, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, errors.New("tlsfiles: a certificate and a key are both required")
	}
	s := &Source{files: files, nextProtos: nextProtos, onReload: onReload, now: time.Now}
	pems, digest, err := s.read()
	if err != nil {
		return nil, err
	}
	cfg, err := s.build(pems)
	if err != nil {
		return nil, err
	}
	s.digest, s.current, s.checked = digest, cfg, s.now()
	return s, nil
}

// Config returns the configuration to give tls.NewListener or gRPC's
// credentials: each handshake gets the current files.
func (s *Source) Config() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         s.nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.config(), nil },
	}
}

// config returns the current configuration, reloading the files first if
// they changed and CheckInterval has passed since the last check.
func (s *Source) config() *tls.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.checked) < CheckInterval {
		return s.current
	}
	s.checked = now
	pems, digest, err := s.read()
	if err == nil && digest == s.digest {
		return s.current
	}
	if err == nil {
		var cfg *tls.Config
		if cfg, err = s.build(pems); err == nil {
			s.digest, s.current = digest, cfg
		}
	}
	if s.onReload != nil {
		s.onReload(err)
	}
	return s.current
}

// read returns the contents of the files (cert, key, client CA) and their
// digest.
func (s *Source) read() ([3][]byte, [sha256.Size]byte, error) {
	var pems [3][]byte
	h := sha256.New()
	for i, name := range []string{s.files.Cert, s.files.Key, s.files.ClientCA} {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return pems, [sha256.Size]byte{}, fmt.Errorf("tlsfiles: %w", err)
		}
		pems[i] = b
		h.Write(b)
		h.Write([]byte{0})
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return pems, d, nil
}

// build parses the files' contents into the configuration a handshake
// uses.
func (s *Source) build(pems [3][]byte) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(pems[0], pems[1])
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: load %s and %s: %w", s.files.Cert, s.files.Key, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   s.nextProtos,
		Certificates: []tls.Certificate{pair},
	}
	if s.files.ClientCA != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pems[2]) {
			return nil, fmt.Errorf("tlsfiles: %s: %w", s.files.ClientCA, ErrNoCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
