package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

func TestParseStubLimits(t *testing.T) {
	cfgWith := func(params map[string]string) *inferencepb.ModelConfig {
		cfg := &inferencepb.ModelConfig{Name: "m", Parameters: map[string]*inferencepb.ModelParameter{}}
		for k, v := range params {
			cfg.Parameters[k] = &inferencepb.ModelParameter{StringValue: v}
		}
		return cfg
	}
	flags := Options{MaxRSSMB: 100, MaxRequestsPerStub: 7, MaxStubAge: time.Minute, MemoryLimitMB: 512}
	for _, tc := range []struct {
		name    string
		params  map[string]string
		opts    Options
		want    stubLimits
		wantErr string
	}{
		{name: "none", want: stubLimits{}},
		{name: "server flags", opts: flags, want: stubLimits{maxRSS: 100 << 20, maxRequests: 7, maxAge: time.Minute, memory: 512 << 20}},
		{name: "parameters override the flags", opts: flags,
			params: map[string]string{"MAX_RSS_MB": "2048", "MAX_REQUESTS_PER_STUB": "0", "MAX_STUB_AGE_S": "3600", "MEMORY_LIMIT_MB": " 256 ", "CUDA_VISIBLE_DEVICES_PER_INSTANCE": "yes"},
			want:   stubLimits{maxRSS: 2048 << 20, maxAge: time.Hour, memory: 256 << 20, cudaVisible: true}},
		{name: "not a number", params: map[string]string{"MAX_RSS_MB": "2G"}, wantErr: "parameter MAX_RSS_MB must be a whole number"},
		{name: "negative", params: map[string]string{"MAX_STUB_AGE_S": "-1"}, wantErr: "parameter MAX_STUB_AGE_S must be a whole number"},
		{name: "bad yes/no", params: map[string]string{"CUDA_VISIBLE_DEVICES_PER_INSTANCE": "maybe"}, wantErr: `must be "yes" or "no"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStubLimits(cfgWith(tc.params), tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseStubLimits = %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseStubLimits = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestHumanBytes(t *testing.T) {
	for in, want := range map[uint64]string{
		512: "512 B", 1536: "1.5 KiB", 150 << 20: "150.0 MiB", 2254857830: "2.1 GiB", 3 << 40: "3.0 TiB",
	} {
		if got := humanBytes(in); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", in, got, want)
		}
	}
}
