package trace

import (
	"fmt"
	"strconv"
	"strings"
)

// Config is the tracing configuration given at start
// (--trace-config, Triton's spellings).
type Config struct {
	Level        int
	Rate         uint32
	Count        int32
	LogFrequency uint32
	File         string
	Mode         string
	// OTel holds the opentelemetry settings (url, resource, bsp_*), in the
	// order given; resource may repeat.
	OTel [][2]string
}

// DefaultConfig is Triton's default: level OFF, rate 1000, count -1.
func DefaultConfig() Config {
	return Config{Rate: 1000, Count: -1, Mode: traceModeTriton}
}

// Parse applies one --trace-config value to c: "<setting>=<value>"
// for the global settings (level, rate, count, mode), "triton,file=..." and
// "triton,log-frequency=..." and "opentelemetry,<setting>=...".
func (c *Config) Parse(spec string) error {
	mode, setting, hasMode := strings.Cut(spec, ",")
	if !hasMode {
		setting, mode = spec, ""
	}
	key, value, ok := strings.Cut(setting, "=")
	if !ok {
		return fmt.Errorf("trace-config: %q: expected <setting>=<value>", spec)
	}
	switch mode {
	case "":
		return c.parseGlobal(key, value)
	case traceModeTriton:
		switch key {
		case "file":
			c.File = value
			return nil
		case "log-frequency":
			n, err := strconv.ParseUint(value, 10, 32)
			if err != nil {
				return fmt.Errorf("trace-config: log-frequency: %w", err)
			}
			c.LogFrequency = uint32(n)
			return nil
		}
	case traceModeOTel:
		switch key {
		case "url", "resource", "bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size":
			c.OTel = append(c.OTel, [2]string{key, value})
			return nil
		}
	default:
		return fmt.Errorf("trace-config: unknown trace mode %q", mode)
	}
	return fmt.Errorf("trace-config: unknown %s setting %q", mode, key)
}

func (c *Config) parseGlobal(key, value string) error {
	switch key {
	case "level":
		switch strings.ToUpper(value) {
		case "OFF":
			c.Level = 0
		case "TIMESTAMPS":
			c.Level |= traceTimestamps
		case "TENSORS":
			c.Level |= traceTensors
		default:
			return fmt.Errorf("trace-config: unknown trace level %q", value)
		}
	case "rate":
		n, err := strconv.ParseUint(value, 10, 32)
		if err != nil {
			return fmt.Errorf("trace-config: rate: %w", err)
		}
		c.Rate = uint32(n)
	case "count":
		n, err := strconv.ParseInt(value, 10, 32)
		if err != nil || n < -1 {
			return fmt.Errorf("trace-config: count: expecting an integer >= -1, got %q", value)
		}
		c.Count = int32(n)
	case "mode":
		if value != traceModeTriton && value != traceModeOTel {
			return fmt.Errorf("trace-config: unknown trace mode %q", value)
		}
		c.Mode = value
	default:
		return fmt.Errorf("trace-config: unknown setting %q", key)
	}
	return nil
}
