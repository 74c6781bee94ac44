package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/stubvisor/stubvisor/supervisor"
)

// This file parses the flags of the response cache, the rate limiter and
// Python-based backends, with tritonserver's spellings and texts.

// cacheFlags are --cache-config and the deprecated --response-cache-byte-size.
type cacheFlags struct {
	configs  []string // --cache-config values as given
	legacy   string   // --response-cache-byte-size, "" when absent
	Enabled  bool     // a local cache is configured
	ByteSize uint64   // its size
}

// rateResource is one --rate-limit-resource: count of the resource name on
// device (-1: on every device).
type rateResource struct {
	Name   string
	Count  int
	Device int
}

// rateFlags are --rate-limit and --rate-limit-resource.
type rateFlags struct {
	Mode      string // "off" (the default) or "execution_count"
	Resources []rateResource
}

// registerFeatures adds the flags of the response cache, the rate limiter
// and Python-based backends to fs.
func (c *config) registerFeatures(fs *flag.FlagSet) {
	fs.StringVar(&c.sup.BackendDirectory, "backend-directory", "/opt/tritonserver/backends", "directory of Python-based backends: a model with backend \"<name>\" runs <dir>/<name>/model.py (the model repository's backends/ is searched next)")
	c.cache.register(fs)
	c.rate.register(fs)
}

// applyFeatures checks them (and --http-max-input-size, with Triton's
// line) once parsed and sets the supervisor's cache and rate limiter.
func (c *config) applyFeatures() error {
	if c.maxInputSize <= 0 {
		return lineError("Error: --http-max-input-size must be greater than 0.")
	}
	if err := c.cache.apply(); err != nil {
		return err
	}
	if c.cache.Enabled {
		c.sup.ResponseCacheBytes = c.cache.ByteSize
	}
	c.sup.RateLimit = c.rate.Mode == "execution_count"
	c.sup.RateLimitResources = nil
	for _, r := range c.rate.Resources {
		c.sup.RateLimitResources = append(c.sup.RateLimitResources, supervisor.RateLimitResource(r))
	}
	return nil
}

func (c *cacheFlags) register(fs *flag.FlagSet) {
	fs.Func("cache-config", "response cache: local,size=<bytes> (tritonserver's <cache>,<setting>=<value>; only the local cache exists here)", func(v string) error {
		c.configs = append(c.configs, v)
		return nil
	})
	fs.Func("response-cache-byte-size", "deprecated: --cache-config local,size=<bytes>", func(v string) error {
		c.legacy = v
		return nil
	})
}

// apply checks the values and sets Enabled and ByteSize.
func (c *cacheFlags) apply() error {
	if c.legacy != "" && len(c.configs) > 0 {
		return lineError("Error: Incompatible flags --response-cache-byte-size and --cache-config both provided. Please provide one or the other.")
	}
	if c.legacy != "" {
		n, err := strconv.ParseUint(c.legacy, 10, 64)
		if err != nil {
			return fmt.Errorf("invalid value %q for --response-cache-byte-size: want a number of bytes", c.legacy)
		}
		c.Enabled, c.ByteSize = true, n
	}
	seen := ""
	for _, v := range c.configs {
		name, setting, ok := strings.Cut(v, ",")
		if !ok || name == "" {
			return fmt.Errorf("No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got %s", v)
		}
		key, value, ok := strings.Cut(setting, "=")
		if !ok || key == "" || value == "" {
			return fmt.Errorf("--cache-config option format is '<cache name>,<setting>=<value>'. Got %s", v)
		}
		if seen != "" && name != seen {
			return fmt.Errorf("invalid --cache-config %q: multiple cache configurations are not supported (already '%s')", v, seen)
		}
		seen = name
		if name != "local" {
			return fmt.Errorf("invalid --cache-config %q: cache '%s' is not available (only the local cache is)", v, name)
		}
		if key != "size" {
			return fmt.Errorf("invalid --cache-config %q: the local cache has no setting '%s' (only size)", v, key)
		}
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return fmt.Errorf("invalid --cache-config %q: size must be a number of bytes", v)
		}
		c.Enabled, c.ByteSize = true, n
	}
	return nil
}

func (r *rateFlags) register(fs *flag.FlagSet) {
	r.Mode = "off"
	fs.Func("rate-limit", "rate limiter mode: off (default) or execution_count", func(v string) error {
		switch m := strings.ToLower(v); m {
		case "off", "execution_count":
			r.Mode = m
			return nil
		}
		return fmt.Errorf("invalid argument for --rate-limit")
	})
	fs.Func("rate-limit-resource", "<name>:<count>[:<device>] resources available to the rate limiter (repeatable)", func(v string) error {
		res, err := parseRateResource(v)
		if err != nil {
			return err
		}
		r.Resources = append(r.Resources, res)
		return nil
	})
}

// parseRateResource parses <name>:<count> or <name>:<count>:<device>.
func parseRateResource(v string) (rateResource, error) {
	bad := fmt.Errorf("--rate-limit-resource option format is '<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got %s", v)
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return rateResource{}, bad
	}
	res := rateResource{Name: parts[0], Device: -1}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 0 {
		return rateResource{}, bad
	}
	res.Count = n
	if len(parts) == 3 {
		d, err := strconv.Atoi(parts[2])
		if err != nil || d < 0 {
			return rateResource{}, bad
		}
		res.Device = d
	}
	return res, nil
}
