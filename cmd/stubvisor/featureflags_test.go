package main

import (
	"slices"
	"strings"
	"testing"
)

func TestCacheAndRateFlags(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		err       string // a part of the error, "" for none
		cache     uint64 // 0: no cache
		mode      string
		resources []rateResource
	}{
		{args: nil, mode: "off"},
		{args: []string{"--cache-config", "local,size=1048576"}, cache: 1048576, mode: "off"},
		{args: []string{"--cache-config=local,size=10", "--cache-config=local,size=20"}, cache: 20, mode: "off"},
		{args: []string{"--response-cache-byte-size=4096"}, cache: 4096, mode: "off"},
		{args: []string{"--response-cache-byte-size=4096", "--cache-config=local,size=1"},
			err: "Error: Incompatible flags --response-cache-byte-size and --cache-config both provided. Please provide one or the other."},
		{args: []string{"--cache-config=size=1"}, err: "No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got size=1"},
		{args: []string{"--cache-config=local,size"}, err: "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size"},
		{args: []string{"--cache-config=redis,host=x"}, err: "cache 'redis' is not available"},
		{args: []string{"--cache-config=local,size=8192", "--cache-config=redis,key=value"}, err: "multiple cache configurations"},
		{args: []string{"--cache-config=local,size=lots"}, err: "size must be a number of bytes"},
		{args: []string{"--rate-limit=EXECUTION_COUNT", "--rate-limit-resource=R1:4", "--rate-limit-resource=R2:2:1"},
			mode: "execution_count", resources: []rateResource{{"R1", 4, -1}, {"R2", 2, 1}}},
		{args: []string{"--rate-limit=fast"}, err: "invalid argument for --rate-limit"},
		{args: []string{"--rate-limit-resource=R1"}, err: "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got R1"},
		{args: []string{"--rate-limit-resource=R1:2:0:1"}, err: "Got R1:2:0:1"},
		{args: []string{"--rate-limit-resource=R1:x"}, err: "Got R1:x"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, err := parseFlags(append([]string{"--model-repository", t.TempDir()}, tc.args...))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.cache.Enabled != (tc.cache != 0) || c.cache.ByteSize != tc.cache {
				t.Errorf("cache %+v, want size %d", c.cache, tc.cache)
			}
			if c.rate.Mode != tc.mode || !slices.Equal(c.rate.Resources, tc.resources) {
				t.Errorf("rate limiter %+v, want %s %v", c.rate, tc.mode, tc.resources)
			}
		})
	}
}
