package main

// TLS end to end: the built binary serving HTTP, gRPC and metrics over TLS
// and mutual TLS, reached by Go clients and curl, rotating its certificate
// files in place without a restart, and keeping its private keys away
// from the stub processes.

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
	"github.com/stubvisor/stubvisor/server/tlsfiles/tlstest"
)

// tlsSetup is a directory of certificates: a server CA and leaf, a client
// CA and leaf, and a CA nobody uses (the wrong one).
type tlsSetup struct {
	dir                   string
	serverCA, clientCA    *tlstest.CA
	otherCA               *tlstest.CA
	server, client, other tlstest.Leaf
}

func newTLSSetup(t *testing.T) *tlsSetup {
	s := &tlsSetup{dir: t.TempDir(), serverCA: tlstest.NewCA(t), clientCA: tlstest.NewCA(t), otherCA: tlstest.NewCA(t)}
	s.server, s.client, s.other = s.serverCA.Issue(t), s.clientCA.Issue(t), s.otherCA.Issue(t)
	s.server.Write(t, s.path("server.crt"), s.path("server.key"))
	s.client.Write(t, s.path("client.crt"), s.path("client.key"))
	s.other.Write(t, s.path("other.crt"), s.path("other.key"))
	tlstest.WriteFile(t, s.path("ca.crt"), s.serverCA.PEM)
	tlstest.WriteFile(t, s.path("client-ca.crt"), s.clientCA.PEM)
	tlstest.WriteFile(t, s.path("other-ca.crt"), s.otherCA.PEM)
	return s
}

func (s *tlsSetup) path(name string) string { return filepath.Join(s.dir, name) }

// httpsClient trusts ca and presents client, if any.
func httpsClient(ca *tlstest.CA, client *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

func httpsGet(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// servedSerial returns the serial number of the certificate the listener
// at addr presents.
func servedSerial(t *testing.T, addr string, ca *tlstest.CA, client *tls.Certificate, alpn string) int64 {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{alpn}}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// curl runs curl with args and returns its exit code and output.
func curl(t *testing.T, args ...string) (int, string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	out, err := exec.Command("curl", append([]string{"-s", "--max-time", "10"}, args...)...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// grpcTLS dials addr with TLS trusting ca (and client, if any) and calls
// ServerLive.
func grpcTLS(t *testing.T, addr string, ca *tlstest.CA, client *tls.Certificate) error {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pb.NewGRPCInferenceServiceClient(conn).ServerLive(callCtx(t), &pb.ServerLiveRequest{})
	return err
}

func hostPort(url string) string { return url[strings.Index(url, "://")+3:] }

// TestTLS: HTTP under mutual TLS, metrics under TLS, gRPC under
// tritonserver's --grpc-use-ssl; then the files are rotated in place.
func TestTLS(t *testing.T) {
	ipctest.RequirePython(t)
	c := newTLSSetup(t)
	s := startServer(t, copyRepo(t, "add_sub"),
		"--http-tls-cert", c.path("server.crt"), "--http-tls-key", c.path("server.key"), "--http-tls-client-ca", c.path("client-ca.crt"),
		"--metrics-tls-cert", c.path("server.crt"), "--metrics-tls-key", c.path("server.key"),
		"--grpc-use-ssl=true", "--grpc-server-cert", c.path("server.crt"), "--grpc-server-key", c.path("server.key"))
	for _, svc := range []string{"HTTP", "gRPC", "metrics"} {
		if !regexp.MustCompile(`listening: service=` + svc + ` address=\S+ tls=true`).MatchString(s.Log()) {
			t.Errorf("%s is not logged as serving TLS", svc)
		}
	}
	httpURL := "https://" + hostPort(s.HTTP)
	metricsURL := "https://" + hostPort(s.Metrics)
	clientPair := c.client.Pair(t)
	otherPair := c.other.Pair(t)

	t.Run("HTTP mutual TLS, Go client", func(t *testing.T) {
		if code, err := httpsGet(httpsClient(c.serverCA, &clientPair), httpURL+"/v2/health/ready"); err != nil || code != 200 {
			t.Errorf("with the client certificate: %d %v", code, err)
		}
		if _, err := httpsGet(httpsClient(c.serverCA, nil), httpURL+"/v2/health/ready"); err == nil {
			t.Error("without a client certificate: the request went through")
		}
		if _, err := httpsGet(httpsClient(c.serverCA, &otherPair), httpURL+"/v2/health/ready"); err == nil {
			t.Error("with a client certificate of another CA: the request went through")
		}
		if _, err := httpsGet(httpsClient(c.otherCA, &clientPair), httpURL+"/v2/health/ready"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("trusting the wrong CA: %v, want a certificate error", err)
		}
		if code, err := httpsGet(http.DefaultClient, s.HTTP+"/v2/health/ready"); err == nil && code == 200 {
			t.Error("plain HTTP was answered")
		}
	})
	t.Run("HTTP mutual TLS, curl", func(t *testing.T) {
		code, out := curl(t, "--cacert", c.path("ca.crt"), "--cert", c.path("client.crt"), "--key", c.path("client.key"),
			"-o", "/dev/null", "-w", "%{http_code}", httpURL+"/v2/health/ready")
		if code != 0 || out != "200" {
			t.Errorf("with the client certificate: exit %d %s", code, out)
		}
		if code, out := curl(t, "--cacert", c.path("ca.crt"), httpURL+"/v2/health/ready"); code == 0 {
			t.Errorf("without a client certificate: exit 0 %s", out)
		}
		if code, out := curl(t, "--cacert", c.path("other-ca.crt"), "--cert", c.path("client.crt"), "--key", c.path("client.key"),
			httpURL+"/v2/health/ready"); code != 60 {
			t.Errorf("trusting the wrong CA: exit %d %s, want 60 (peer certificate cannot be authenticated)", code, out)
		}
	})
	t.Run("metrics TLS", func(t *testing.T) {
		if code, err := httpsGet(httpsClient(c.serverCA, nil), metricsURL+"/metrics"); err != nil || code != 200 {
			t.Errorf("Go client: %d %v", code, err)
		}
		code, out := curl(t, "--cacert", c.path("ca.crt"), "-o", "/dev/null", "-w", "%{http_code}", metricsURL+"/metrics")
		if code != 0 || out != "200" {
			t.Errorf("curl: exit %d %s", code, out)
		}
		if code, out := curl(t, "--cacert", c.path("other-ca.crt"), metricsURL+"/metrics"); code != 60 {
			t.Errorf("curl trusting the wrong CA: exit %d %s, want 60", code, out)
		}
	})
	t.Run("gRPC TLS", func(t *testing.T) {
		if err := grpcTLS(t, s.GRPC, c.serverCA, nil); err != nil {
			t.Errorf("trusting the server CA: %v", err)
		}
		if err := grpcTLS(t, s.GRPC, c.otherCA, nil); err == nil {
			t.Error("trusting the wrong CA: the call went through")
		}
		conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := pb.NewGRPCInferenceServiceClient(conn).ServerLive(callCtx(t), &pb.ServerLiveRequest{}); err == nil {
			t.Error("plaintext: the call went through")
		}
	})
	t.Run("stubs hold no key", func(t *testing.T) {
		assertStubsHoldNoKey(t, s, c.path("server.key"), c.server.KeyPEM)
	})
	t.Run("rotation without restart", func(t *testing.T) {
		pid := s.cmd.Process.Pid
		next := c.serverCA.Issue(t)
		// Replace the files as a secret volume does: new files renamed
		// over the old ones.
		next.Write(t, c.path("server.crt.new"), c.path("server.key.new"))
		for _, n := range []string{"server.crt", "server.key"} {
			if err := os.Rename(c.path(n+".new"), c.path(n)); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range []struct{ name, addr, alpn string }{
			{"HTTP", hostPort(s.HTTP), "http/1.1"}, {"metrics", hostPort(s.Metrics), "http/1.1"}, {"gRPC", s.GRPC, "h2"},
		} {
			waitFor(t, 10*time.Second, l.name+" to present the rotated certificate", func() bool {
				return servedSerial(t, l.addr, c.serverCA, &clientPair, l.alpn) == next.Serial
			})
		}
		if code, err := httpsGet(httpsClient(c.serverCA, &clientPair), httpURL+"/v2/health/ready"); err != nil || code != 200 {
			t.Errorf("HTTP after rotation: %d %v", code, err)
		}
		if err := grpcTLS(t, s.GRPC, c.serverCA, nil); err != nil {
			t.Errorf("gRPC after rotation: %v", err)
		}
		if s.cmd.Process.Pid != pid || strings.Count(s.Log(), "stubvisor started") != 1 {
			t.Error("the server restarted")
		}
		if !strings.Contains(s.Log(), "TLS files reloaded") {
			t.Error("the reload was not logged")
		}
	})
}

// TestGRPCMutualTLS: --grpc-use-ssl-mutual requires a client certificate
// that --grpc-root-cert verifies.
func TestGRPCMutualTLS(t *testing.T) {
	c := newTLSSetup(t)
	s := startServer(t, t.TempDir(), "--grpc-use-ssl-mutual=true", "--grpc-server-cert", c.path("server.crt"),
		"--grpc-server-key", c.path("server.key"), "--grpc-root-cert", c.path("client-ca.crt"))
	clientPair, otherPair := c.client.Pair(t), c.other.Pair(t)
	if err := grpcTLS(t, s.GRPC, c.serverCA, &clientPair); err != nil {
		t.Errorf("with the client certificate: %v", err)
	}
	if err := grpcTLS(t, s.GRPC, c.serverCA, nil); err == nil {
		t.Error("without a client certificate: the call went through")
	}
	if err := grpcTLS(t, s.GRPC, c.serverCA, &otherPair); err == nil {
		t.Error("with a client certificate of another CA: the call went through")
	}
	if err := grpcTLS(t, s.GRPC, c.otherCA, &clientPair); err == nil {
		t.Error("trusting the wrong CA: the call went through")
	}
}

// TestTLSFlagErrors: TLS settings that would serve plaintext, or that do
// not load, stop the server at start naming the flag.
func TestTLSFlagErrors(t *testing.T) {
	c := newTLSSetup(t)
	tlstest.WriteFile(t, c.path("junk"), []byte("junk"))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-use-ssl=true"}, "--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key"},
		{[]string{"--grpc-use-ssl-mutual=true", "--grpc-server-cert", c.path("server.crt"), "--grpc-server-key", c.path("server.key")},
			"--grpc-use-ssl-mutual needs --grpc-root-cert"},
		{[]string{"--http-tls-cert", c.path("server.crt")}, "--http-tls-cert and --http-tls-key go together"},
		{[]string{"--metrics-tls-key", c.path("server.key")}, "--metrics-tls-cert and --metrics-tls-key go together"},
		{[]string{"--http-tls-client-ca", c.path("client-ca.crt")}, "--http-tls-client-ca needs --http-tls-cert and --http-tls-key"},
		{[]string{"--http-tls-cert", c.path("server.crt"), "--http-tls-key", c.path("junk")}, "HTTP TLS: tlsfiles: load"},
		{[]string{"--http-tls-cert", c.path("server.crt"), "--http-tls-key", c.path("server.key"), "--http-tls-client-ca", c.path("junk")},
			"no PEM certificate in the client CA file"},
	}
	for i, tc := range cases {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			out, err := exec.Command(binPath, append([]string{"--model-repository", t.TempDir(), "--http-port", "0", "--grpc-port", "0",
				"--metrics-port", "0", "--address", "127.0.0.1"}, tc.args...)...).CombinedOutput()
			if _, ok := err.(*exec.ExitError); !ok || !strings.Contains(string(out), tc.want) {
				t.Errorf("%v: got %v:\n%s\nwant a failed start with %q", tc.args, err, out, tc.want)
			}
		})
	}
}

// assertStubsHoldNoKey fails if a stub process of s has the key file open
// or the key's path or contents in its environment.
func assertStubsHoldNoKey(t *testing.T, s *server, keyPath string, keyPEM []byte) {
	t.Helper()
	stubs := childrenOf(s.cmd.Process.Pid)
	if len(stubs) == 0 {
		t.Fatal("no stub process to inspect")
	}
	keyBody := strings.Split(strings.TrimSpace(string(keyPEM)), "\n")[1]
	for _, pid := range stubs {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if target == keyPath {
				t.Errorf("stub %d holds the key file as fd %s", pid, fd.Name())
			}
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(env), keyPath) || strings.Contains(string(env), keyBody) || strings.Contains(string(env), "PRIVATE KEY") {
			t.Errorf("stub %d has the key in its environment", pid)
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), keyPath) {
			t.Errorf("stub %d has the key path on its command line", pid)
		}
	}
	// The server itself reads the key and closes it.
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid))
	for _, fd := range fds {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", s.cmd.Process.Pid, fd.Name())); target == keyPath {
			t.Errorf("the server keeps the key file open as fd %s", fd.Name())
		}
	}
}
