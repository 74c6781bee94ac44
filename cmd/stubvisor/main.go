// Command stubvisor serves the models of one or more model repositories
// over the KServe v2 protocol (HTTP and gRPC), running each model instance
// in a supervised stub process: Python (Triton's TritonPythonModel,
// unchanged) or Go.
//
//	stubvisor --model-repository ./models
//
// Flags follow tritonserver's names where the feature is the same.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	frontend "github.com/stubvisor/stubvisor/server"
	"github.com/stubvisor/stubvisor/server/openai"
	"github.com/stubvisor/stubvisor/supervisor"
)

// version is the server version reported by server metadata.
var version = "0.1.0"

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// config is everything the flags set.
type config struct {
	repos           listFlag
	loadModels      listFlag
	httpPort        int
	grpcPort        int
	metricsPort     int
	address         string
	logVerbose      int
	logFormat       string
	controlMode     string
	pollSecs        int
	strictReadiness bool
	exitTimeout     int
	drainDelay      int
	exitOnError     bool
	cpuPolicy       supervisor.CPUPolicy
	allowClientShm  bool
	maxInputSize    int64
	maxGRPCMessage  int
	bodyTimeout     time.Duration
	maxInflight     int64
	autoComplete    bool
	httpForward     string
	http            httpFlags
	grpcForward     string
	triton          tritonFlags
	tls             tlsFlags
	keepalive       keepaliveFlags
	httpRestrict    *frontend.Restrictions
	grpcRestrict    *frontend.Restrictions
	cache           cacheFlags
	rate            rateFlags
	trace           frontend.TraceConfig
	openaiPort      int
	openai          openai.Options
	chatTemplate    string
	sup             supervisor.Options
}

// traceFlag applies each --trace-config value (and the deprecated
// --trace-* flags, as "<setting>=<value>" with prefix) to the trace
// configuration as it is given.
type traceFlag struct {
	c      *frontend.TraceConfig
	prefix string
}

func (f traceFlag) String() string     { return "" }
func (f traceFlag) Set(v string) error { return f.c.Parse(f.prefix + v) }

func parseFlags(args []string) (*config, error) {
	c := &config{sup: supervisor.DefaultOptions(), trace: frontend.DefaultTraceConfig(),
		httpRestrict: frontend.NewHTTPRestrictions(), grpcRestrict: frontend.NewGRPCRestrictions()}
	fs := flag.NewFlagSet("stubvisor", flag.ContinueOnError)
	fs.Var(&c.repos, "model-repository", "model repository directory (repeatable)")
	fs.Var(&c.loadModels, "load-model", "model to load at start in explicit mode, or * for all (repeatable)")
	fs.IntVar(&c.httpPort, "http-port", 8000, "HTTP/REST port (0: pick a free one, -1: off)")
	fs.IntVar(&c.grpcPort, "grpc-port", 8001, "gRPC port (0: pick a free one, -1: off)")
	fs.IntVar(&c.metricsPort, "metrics-port", 8002, "Prometheus metrics port (0: pick a free one, -1: off)")
	fs.StringVar(&c.address, "address", "0.0.0.0", "address the listeners bind")
	fs.IntVar(&c.logVerbose, "log-verbose", 0, "verbose logging level (>0: debug, >1: trace)")
	fs.StringVar(&c.logFormat, "log-format", "default", "log format: default, ISO8601 or json")
	fs.StringVar(&c.controlMode, "model-control-mode", "none", "model control mode: none, poll or explicit")
	fs.IntVar(&c.pollSecs, "repository-poll-secs", 15, "repository poll interval in poll mode")
	fs.BoolVar(&c.strictReadiness, "strict-readiness", true, "server is ready only when every loaded model is ready")
	fs.IntVar(&c.exitTimeout, "exit-timeout-secs", 30, "how long shutdown waits for in-flight requests")
	fs.IntVar(&c.drainDelay, "drain-delay-secs", 0, "after SIGTERM, how long the server reports not ready but still accepts requests before it shuts down (part of --exit-timeout-secs)")
	fs.BoolVar(&c.exitOnError, "exit-on-error", true, "exit when a model loaded at start fails to load, as tritonserver does (false: serve the others)")
	fs.BoolVar(&c.allowClientShm, "allow-client-shm", false, "allow clients to register system and CUDA shared memory")
	fs.Int64Var(&c.maxInputSize, "http-max-input-size", frontend.DefaultMaxInputSize, "largest HTTP request body in bytes")
	fs.IntVar(&c.maxGRPCMessage, "grpc-max-message-size", frontend.MaxGRPCMessageSize, "largest gRPC message in bytes, received or sent")
	fs.DurationVar(&c.bodyTimeout, "request-body-timeout", frontend.DefaultBodyTimeout, "how long a client may pause while sending a request body (HTTP), or a unary RPC's message may take beyond this plus its size at 8 MiB/s (gRPC)")
	fs.Int64Var(&c.maxInflight, "max-inflight-request-bytes", frontend.DefaultMaxInflightBytes, "budget of request bytes held by requests in flight, HTTP and gRPC together; requests over it get 503 or RESOURCE_EXHAUSTED")
	fs.BoolVar(&c.autoComplete, "auto-complete-config", true, "run auto_complete_config of Python models")
	fs.Var(traceFlag{&c.trace, ""}, "trace-config", "tracing: level=, rate=, count=, mode=triton|opentelemetry, triton,file=, triton,log-frequency=, opentelemetry,url= (repeatable)")
	fs.Var(traceFlag{&c.trace, "triton,file="}, "trace-file", "deprecated: --trace-config triton,file=")
	fs.Var(traceFlag{&c.trace, "level="}, "trace-level", "deprecated: --trace-config level=")
	fs.Var(traceFlag{&c.trace, "rate="}, "trace-rate", "deprecated: --trace-config rate=")
	fs.Var(traceFlag{&c.trace, "count="}, "trace-count", "deprecated: --trace-config count=")
	fs.Var(traceFlag{&c.trace, "triton,log-frequency="}, "trace-log-frequency", "deprecated: --trace-config triton,log-frequency=")
	disableAC := fs.Bool("disable-auto-complete-config", false, "do not run auto_complete_config")
	fs.StringVar(&c.sup.Python, "python", c.sup.Python, "Python interpreter of the stubs (with numpy and msgpack)")
	fs.StringVar(&c.sup.CacheDir, "cache-dir", "", "directory for extracted stub files, unpacked environments and built Go models")
	shmDefault := fs.Uint64("shm-default-byte-size", c.sup.IPC.Pool.DefaultBytes, "bytes each stub pool arena starts with")
	shmGrowth := fs.Uint64("shm-growth-byte-size", c.sup.IPC.Pool.GrowthBytes, "bytes a stub pool arena grows by")
	shmMax := fs.Uint64("shm-max-byte-size", c.sup.IPC.Pool.MaxBytes, "largest size of a stub pool arena")
	ringBytes := fs.Uint("shm-ring-byte-size", uint(c.sup.IPC.RingBytes), "bytes of each stub message ring (power of two)")
	spin := fs.Duration("stub-spin", c.sup.IPC.Spin, "how long a waiter polls its ring before sleeping")
	registerCPUPolicy(fs, &c.cpuPolicy)
	registerStubTimeouts(fs, &c.sup)
	registerStubLimits(fs, &c.sup)
	c.http.register(fs, &c.httpForward)
	fs.StringVar(&c.grpcForward, "grpc-header-forward-pattern", "", "forward the gRPC request metadata whose keys match this regular expression (case-insensitive) to the model as request parameters")
	fs.IntVar(&c.openaiPort, "openai-port", -1, "OpenAI-compatible API port (0: pick a free one, -1: off)")
	fs.StringVar(&c.openai.LoraSeparator, "lora-separator", "", "OpenAI API: a model may be named <model><separator><LoRA adapter>")
	fs.StringVar(&c.openai.ToolCallParser, "tool-call-parser", "", "OpenAI API: parse tool calls in chat output: llama3 or mistral")
	fs.StringVar(&c.chatTemplate, "chat-template", "", "OpenAI API: a Jinja chat template file used for every model instead of its own")
	fs.IntVar(&c.openai.DefaultMaxTokens, "default-max-tokens", openai.DefaultMaxTokens, "OpenAI API: max_tokens of a request that sets none")
	c.registerSecurity(fs)
	c.triton.register(fs, c)
	// A bad flag is reported once, by main (launch scripts grep the log
	// for tritonserver's messages and count them); -help prints the usage.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fs.Usage()
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if len(c.repos) == 0 {
		return nil, errors.New("--model-repository is required")
	}
	c.sup.IPC.Pool.DefaultBytes, c.sup.IPC.Pool.GrowthBytes, c.sup.IPC.Pool.MaxBytes = *shmDefault, *shmGrowth, *shmMax
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if err := c.triton.apply(c, explicit); err != nil {
		return nil, err
	}
	if c.chatTemplate != "" {
		b, err := os.ReadFile(c.chatTemplate)
		if err != nil {
			return nil, fmt.Errorf("--chat-template: %w", err)
		}
		c.openai.ChatTemplate = string(b)
	}
	if err := c.applyFeatures(); err != nil {
		return nil, err
	}
	if err := c.checkSecurity(); err != nil {
		return nil, err
	}
	c.sup.IPC.RingBytes = uint32(*ringBytes)
	c.sup.IPC.Spin = *spin
	c.sup.Repositories = c.repos
	c.sup.ModelControl = c.controlMode
	c.sup.StartupModels = c.loadModels
	c.sup.PollInterval = time.Duration(c.pollSecs) * time.Second
	c.sup.StrictReadiness = c.strictReadiness
	c.sup.AllowClientShm = c.allowClientShm
	c.sup.AutoCompleteConfig = c.autoComplete && !*disableAC
	return c, nil
}

// registerCPUPolicy registers --cpu-policy (supervisor.CPUPolicy).
func registerCPUPolicy(fs *flag.FlagSet, policy *supervisor.CPUPolicy) {
	*policy = supervisor.PolicyBatch
	fs.Func("cpu-policy", "how the server and its stubs share the CPU: batch (default: the server's threads never preempt a stub on wake-up) or latency (the server and its stubs run with a 100 µs slice, so their wake-ups preempt CPU-bound neighbours)", func(v string) error {
		if p := supervisor.CPUPolicy(v); p == supervisor.PolicyLatency || p == supervisor.PolicyBatch {
			*policy = p
			return nil
		}
		return fmt.Errorf("%q: want latency or batch", v)
	})
}

func newLogger(c *config) hclog.Logger {
	level := hclog.Info
	switch {
	case c.logVerbose > 1:
		level = hclog.Trace
	case c.logVerbose > 0:
		level = hclog.Debug
	}
	opts := &hclog.LoggerOptions{Name: "stubvisor", Level: level, Output: os.Stderr, JSONFormat: c.logFormat == "json"}
	if c.logFormat == "ISO8601" {
		opts.TimeFormat = "2006-01-02T15:04:05Z07:00"
	}
	return hclog.New(opts)
}

func main() {
	if code, ok := runInit(); ok {
		os.Exit(code)
	}
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		var line lineError
		if errors.As(err, &line) {
			fmt.Fprintln(os.Stderr, string(line))
		} else {
			fmt.Fprintln(os.Stderr, "stubvisor:", err)
		}
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "stubvisor:", err)
		os.Exit(1)
	}
}

// lineError is a command-line error printed as it is, without the
// "stubvisor:" prefix: tritonserver's own line, which launch scripts and
// NVIDIA's tests look for in the log.
type lineError string

func (e lineError) Error() string { return string(e) }

// service is one listener of the server.
type service struct {
	name  string
	port  int
	serve func(net.Listener) error
	tls   bool
}

// errStartupModels ends the server when a model loaded at start failed
// and --exit-on-error is on (tritonserver: "failed to load all models").
var errStartupModels = errors.New("failed to load all models")

// replyGrace is how long past --exit-timeout-secs the front ends may take
// to answer the requests that failed at the deadline.
const replyGrace = 500 * time.Millisecond

// defaultGCPercent is the binary's GOGC unless the environment sets one.
const defaultGCPercent = 400

// run serves until SIGINT or SIGTERM, then shuts down in order: stop
// accepting, drain in-flight requests, fail what is left, finalize every
// model, kill every stub, all within --exit-timeout-secs (and replyGrace
// for the last replies).
func run(c *config) error {
	log := newLogger(c)
	c.sup.Logger = log
	for _, f := range c.triton.ignored {
		log.Warn("ignoring a tritonserver flag that has no effect here", "flag", f)
	}
	if err := protectProcess(); err != nil {
		log.Warn("could not make the server non-dumpable; model code could read its memory", "error", err)
	}
	if c.rate.Mode == "off" && len(c.rate.Resources) > 0 {
		log.Warn("--rate-limit-resource has no effect while --rate-limit is off")
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)

	if os.Getenv("GOGC") == "" {
		// Tensors live in shared memory and request bodies are pooled, so
		// the Go heap holds little; at Go's default of collecting every
		// time it doubles, collection took about a tenth of the CPU under
		// load. GOGC, when set, still decides.
		debug.SetGCPercent(defaultGCPercent)
	}
	if err := supervisor.SetCPUPolicy(c.cpuPolicy); err != nil {
		log.Warn("could not set the CPU policy", "error", err)
	}
	sup, err := supervisor.New(c.sup)
	if err != nil {
		return err
	}
	if failed := sup.StartupFailures(); c.exitOnError && len(failed) > 0 {
		sup.Close(time.Duration(c.exitTimeout) * time.Second)
		return fmt.Errorf("%w: %s (--exit-on-error=false serves the others)", errStartupModels, strings.Join(failed, ", "))
	}
	backend := &drainBackend{Supervisor: sup}
	fronts, err := newFrontEnds(c, backend, log)
	if err != nil {
		sup.Close(time.Duration(c.exitTimeout) * time.Second)
		return err
	}
	services := fronts.services(c)
	errc := make(chan error, len(services))
	var wg sync.WaitGroup
	for _, svc := range services {
		if svc.port < 0 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(c.address, strconv.Itoa(svc.port)))
		if err != nil {
			fronts.stop()
			sup.Close(time.Duration(c.exitTimeout) * time.Second)
			return fmt.Errorf("listen %s: %w", svc.name, err)
		}
		// Tests start the binary on port 0 and read the chosen ports here.
		log.Info("listening", "service", svc.name, "address", l.Addr().String(), "tls", svc.tls)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := svc.serve(l); err != nil {
				errc <- fmt.Errorf("%s: %w", svc.name, err)
			}
		}()
	}
	log.Info("stubvisor started", "version", version)
	select {
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String())
	case err = <-errc:
		log.Error("listener failed; shutting down", "error", err)
	}
	deadline := time.Now().Add(time.Duration(c.exitTimeout) * time.Second)
	if err == nil { // a signal: not ready, and serving on for the drain delay
		backend.drain(time.Duration(c.drainDelay)*time.Second, deadline, sigs, log)
	}
	// The front ends stop accepting and wait for their requests, which the
	// supervisor lets run until the deadline; then it fails what is left,
	// finalizes with the time that remains and kills the rest. The front
	// ends get a moment past the deadline to write those failures.
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(replyGrace))
	defer cancel()
	var stopped sync.WaitGroup
	fronts.shutdown(ctx, log, &stopped)
	sup.Close(time.Until(deadline))
	stopped.Wait()
	wg.Wait()
	log.Info("stopped")
	return err
}

// checkSecurity refuses settings under which a listener would serve with
// less protection than the flags asked for.
func (c *config) checkSecurity() error {
	if err := c.tls.check(); err != nil {
		return err
	}
	if _, err := c.keepalive.options(); err != nil {
		return err
	}
	return nil
}
