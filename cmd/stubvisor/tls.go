package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/stubvisor/stubvisor/server/tlsfiles"
)

// tlsFlags are the TLS settings of the three listeners. gRPC takes
// tritonserver's flags; HTTP and metrics, which tritonserver leaves to a
// proxy, take stubvisor's own --http-tls-* and --metrics-tls-*.
type tlsFlags struct {
	grpcUseSSL    bool
	grpcMutualSet bool // --grpc-use-ssl-mutual given, whatever its value
	grpcMutual    bool
	grpcCert      string
	grpcKey       string
	grpcRoot      string
	http          tlsfiles.Files
	metrics       tlsfiles.Files
}

// boolSetFlag is a bool flag that records that it was given.
type boolSetFlag struct {
	v   *bool
	set *bool
}

func (f boolSetFlag) String() string {
	if f.v == nil {
		return "false"
	}
	return fmt.Sprint(*f.v)
}
func (f boolSetFlag) IsBoolFlag() bool { return true }
func (f boolSetFlag) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*f.v, *f.set = b, true
	return nil
}

// registerSecurity adds the flags of restricted APIs, TLS and the gRPC
// keepalive policy to fs.
func (c *config) registerSecurity(fs *flag.FlagSet) {
	fs.Var(c.httpRestrict, "http-restricted-api", "<api>[,<api>...]:<header>=<value>: those HTTP API groups answer 403 unless the request has the header with that value (repeatable; groups: health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging)")
	fs.Var(c.grpcRestrict, "grpc-restricted-protocol", "<protocol>[,<protocol>...]:<key>=<value>: those gRPC groups fail UNAVAILABLE unless the call carries metadata triton-grpc-protocol-<key> with that value (repeatable; groups as --http-restricted-api)")
	c.tls.register(fs)
	c.keepalive.register(fs)
}

// register adds the TLS flags to fs.
func (t *tlsFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&t.grpcUseSSL, "grpc-use-ssl", false, "serve gRPC over TLS (--grpc-server-cert, --grpc-server-key)")
	fs.Var(boolSetFlag{&t.grpcMutual, &t.grpcMutualSet}, "grpc-use-ssl-mutual", "serve gRPC over mutual TLS: clients must present a certificate --grpc-root-cert verifies (given at all, it turns TLS on, as in tritonserver)")
	fs.StringVar(&t.grpcCert, "grpc-server-cert", "", "PEM file of the gRPC server certificate (reloaded when it changes)")
	fs.StringVar(&t.grpcKey, "grpc-server-key", "", "PEM file of the gRPC server key (reloaded when it changes)")
	fs.StringVar(&t.grpcRoot, "grpc-root-cert", "", "PEM file of the CA that verifies gRPC client certificates under --grpc-use-ssl-mutual")
	for _, l := range []struct {
		name string
		f    *tlsfiles.Files
	}{{"http", &t.http}, {"metrics", &t.metrics}} {
		fs.StringVar(&l.f.Cert, l.name+"-tls-cert", "", "PEM file of the "+l.name+" server certificate: serve "+l.name+" over TLS (reloaded when it changes)")
		fs.StringVar(&l.f.Key, l.name+"-tls-key", "", "PEM file of the "+l.name+" server key (reloaded when it changes)")
		fs.StringVar(&l.f.ClientCA, l.name+"-tls-client-ca", "", "PEM file of the CA that must verify "+l.name+" client certificates (mutual TLS)")
	}
}

// grpcFiles returns the gRPC files, or ok false when gRPC is plaintext.
func (t *tlsFlags) grpcFiles() (f tlsfiles.Files, ok bool, err error) {
	if !t.grpcUseSSL && !t.grpcMutualSet {
		return f, false, nil
	}
	f = tlsfiles.Files{Cert: t.grpcCert, Key: t.grpcKey}
	if f.Cert == "" || f.Key == "" {
		return f, false, errors.New("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
	}
	if t.grpcMutual {
		if t.grpcRoot == "" {
			return f, false, errors.New("--grpc-use-ssl-mutual needs --grpc-root-cert")
		}
		f.ClientCA = t.grpcRoot
	}
	return f, true, nil
}

// any reports whether any listener is to serve TLS.
func (t *tlsFlags) any() bool {
	return t.grpcUseSSL || t.grpcMutualSet || t.http.Cert != "" || t.metrics.Cert != ""
}

// check refuses settings that would serve plaintext where TLS was meant.
func (t *tlsFlags) check() error {
	if _, _, err := t.grpcFiles(); err != nil {
		return err
	}
	for _, l := range []struct {
		name string
		f    tlsfiles.Files
	}{{"http", t.http}, {"metrics", t.metrics}} {
		if (l.f.Cert == "") != (l.f.Key == "") {
			return fmt.Errorf("--%[1]s-tls-cert and --%[1]s-tls-key go together", l.name)
		}
		if l.f.ClientCA != "" && l.f.Cert == "" {
			return fmt.Errorf("--%[1]s-tls-client-ca needs --%[1]s-tls-cert and --%[1]s-tls-key", l.name)
		}
	}
	return nil
}

// listenerTLS is how one listener is secured: nil wraps nothing.
type listenerTLS struct {
	http, metrics *tls.Config
	grpc          []grpc.ServerOption
}

// build loads the files (failing at start when they do not load) and
// returns the configurations; reloads are logged to log.
func (t *tlsFlags) build(log hclog.Logger) (*listenerTLS, error) {
	out := &listenerTLS{}
	source := func(name string, f tlsfiles.Files, protos []string) (*tls.Config, error) {
		src, err := tlsfiles.New(f, protos, func(err error) {
			if err != nil {
				log.Warn("TLS files changed but did not load; the previous ones stay in use", "service", name, "error", err)
				return
			}
			log.Info("TLS files reloaded", "service", name)
		})
		if err != nil {
			return nil, fmt.Errorf("%s TLS: %w", name, err)
		}
		return src.Config(), nil
	}
	var err error
	if t.http.Cert != "" {
		if out.http, err = source("HTTP", t.http, []string{"http/1.1"}); err != nil {
			return nil, err
		}
	}
	if t.metrics.Cert != "" {
		if out.metrics, err = source("metrics", t.metrics, []string{"http/1.1"}); err != nil {
			return nil, err
		}
	}
	if f, ok, err := t.grpcFiles(); err != nil {
		return nil, err
	} else if ok {
		cfg, err := source("gRPC", f, []string{"h2"})
		if err != nil {
			return nil, err
		}
		out.grpc = []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}
	} else if t.grpcCert != "" || t.grpcKey != "" || t.grpcRoot != "" {
		log.Warn("gRPC serves plaintext: --grpc-server-cert, --grpc-server-key and --grpc-root-cert take effect with --grpc-use-ssl, as in tritonserver")
	}
	return out, nil
}

// wrap returns l serving TLS with cfg, or l itself when cfg is nil.
func wrap(l net.Listener, cfg *tls.Config) net.Listener {
	if cfg == nil {
		return l
	}
	return tls.NewListener(l, cfg)
}
