package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file accepts the tritonserver flags a launch script written for
// Triton passes: the spellings that mean something here are mapped onto
// our flags, and the GPU-only and Triton-internal ones are accepted and
// logged as ignored, so that such a script starts the server unchanged.

// ignoredTritonFlags take a value in tritonserver and have no effect here
// (GPU memory pools, backends and agents we do not load, Triton's own
// thread pools, caches and log files). Only flags whose ignoring is
// harmless belong here: each has a row in docs/security.md saying why
// (TestIgnoredFlagsDocumented). A flag that protects a deployment or
// changes what a client may do must work or stay unknown, so that the
// server refuses to start with it.
var ignoredTritonFlags = []string{
	"repoagent-directory", "cache-directory",
	"pinned-memory-pool-byte-size", "cuda-memory-pool-byte-size", "cuda-virtual-address-size",
	"min-supported-compute-capability", "buffer-manager-thread-count",
	"model-load-thread-count", "model-load-retry-count", "model-namespacing",
	"model-load-gpu-limit", "host-policy", "allow-gpu-metrics", "allow-cpu-metrics",
	"metrics-interval-ms", "metrics-config", "log-info", "log-warning", "log-error", "log-file",
	"id", "server-id", "http-thread-count", "grpc-infer-allocation-pool-size",
	"grpc-infer-thread-count", "grpc-max-response-pool-size", "reuse-http-port", "reuse-grpc-port",
	"allow-sagemaker", "allow-vertex-ai", "grpc-infer-response-compression-level",
}

// ignoredFlagChecks refuse, with tritonserver's text, the values of ignored
// flags that tritonserver refuses, so that a launch script that would not
// start Triton does not start this server either.
var ignoredFlagChecks = map[string]func(string) error{
	"grpc-infer-thread-count": func(v string) error {
		if n, err := strconv.Atoi(v); err != nil || n < 2 || n > 128 {
			return errors.New("invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.")
		}
		return nil
	},
}

// tritonFlags holds what the Triton spellings set until they are applied.
type tritonFlags struct {
	backendConfig listFlag
	ignored       []string // "flag=value" of the flags ignored, logged at start
	allowHTTP     *bool
	allowGRPC     *bool
	allowMetrics  *bool
	strictConfig  *string
	addresses     map[string]*string
}

// register adds the Triton spellings to fs.
func (t *tritonFlags) register(fs *flag.FlagSet, c *config) {
	fs.Var(&c.repos, "model-store", "model repository directory (tritonserver's older name of --model-repository)")
	fs.Var(&t.backendConfig, "backend-config", "tritonserver's <backend>,<setting>=<value>: python's shm-default-byte-size, shm-growth-byte-size and stub-timeout-seconds are used, the rest ignored (repeatable)")
	t.allowHTTP = fs.Bool("allow-http", true, "serve HTTP (false: as --http-port=-1)")
	t.allowGRPC = fs.Bool("allow-grpc", true, "serve gRPC (false: as --grpc-port=-1)")
	t.allowMetrics = fs.Bool("allow-metrics", true, "serve metrics (false: as --metrics-port=-1)")
	t.strictConfig = fs.String("strict-model-config", "", "tritonserver's older switch: true is --disable-auto-complete-config")
	t.addresses = map[string]*string{}
	for _, name := range []string{"http-address", "grpc-address", "metrics-address"} {
		t.addresses[name] = fs.String(name, "", "address of that listener; stubvisor binds every listener to one address, so this sets --address")
	}
	// The response cache, the rate limiter and Python-based backends
	// (featureflags.go).
	c.registerFeatures(fs)
	for _, name := range ignoredTritonFlags {
		fs.Func(name, "tritonserver flag accepted and ignored (no effect in stubvisor)", func(v string) error {
			if check := ignoredFlagChecks[name]; check != nil {
				if err := check(v); err != nil {
					return err
				}
			}
			t.ignored = append(t.ignored, name+"="+v)
			return nil
		})
	}
}

// apply maps the Triton spellings onto c. explicit names the flags the
// command line set, which win over a --backend-config of the same setting.
func (t *tritonFlags) apply(c *config, explicit map[string]bool) error {
	for _, bc := range t.backendConfig {
		if err := t.applyBackendConfig(c, bc, explicit); err != nil {
			return err
		}
	}
	if !*t.allowHTTP {
		c.httpPort = -1
	}
	if !*t.allowGRPC {
		c.grpcPort = -1
	}
	if !*t.allowMetrics {
		c.metricsPort = -1
	}
	if *t.strictConfig != "" {
		strict, err := strconv.ParseBool(*t.strictConfig)
		if err != nil {
			return fmt.Errorf("invalid value %q for --strict-model-config", *t.strictConfig)
		}
		if strict {
			c.autoComplete = false
		}
	}
	for _, name := range []string{"http-address", "grpc-address", "metrics-address"} {
		if a := *t.addresses[name]; a != "" && !explicit["address"] {
			c.address = a
		}
	}
	return nil
}

// applyBackendConfig applies one --backend-config value.
func (t *tritonFlags) applyBackendConfig(c *config, bc string, explicit map[string]bool) error {
	backend, setting, ok := strings.Cut(bc, ",")
	if !ok {
		// A global setting (<setting>=<value>) of Triton's backends.
		t.ignored = append(t.ignored, "backend-config="+bc)
		return nil
	}
	key, value, ok := strings.Cut(setting, "=")
	if !ok {
		return fmt.Errorf("invalid --backend-config %q, want <backend>,<setting>=<value>", bc)
	}
	if backend != "python" {
		t.ignored = append(t.ignored, "backend-config="+bc)
		return nil
	}
	size := func(dst *uint64, flagName string) error {
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil || n == 0 {
			return fmt.Errorf("invalid --backend-config %q: %s must be a positive number of bytes", bc, key)
		}
		if !explicit[flagName] {
			*dst = n
		}
		return nil
	}
	switch key {
	case "shm-default-byte-size":
		return size(&c.sup.IPC.Pool.DefaultBytes, "shm-default-byte-size")
	case "shm-growth-byte-size":
		return size(&c.sup.IPC.Pool.GrowthBytes, "shm-growth-byte-size")
	case "stub-timeout-seconds":
		n, err := strconv.ParseUint(value, 10, 31)
		if err != nil || n == 0 {
			return fmt.Errorf("invalid --backend-config %q: stub-timeout-seconds must be a positive number of seconds", bc)
		}
		if !explicit["stub-start-timeout"] {
			c.sup.StubStartTimeout = time.Duration(n) * time.Second
		}
	default:
		// shm-region-prefix-name (regions here are memfds, never names in
		// /dev/shm), shm-message-queue-size and the rest.
		t.ignored = append(t.ignored, "backend-config="+bc)
	}
	return nil
}
