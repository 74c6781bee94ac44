package trace

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestTraceConfigParse(t *testing.T) {
	cases := []struct {
		name  string
		specs []string
		want  Config
		err   bool
	}{
		{"defaults", nil, Config{Rate: 1000, Count: -1, Mode: "triton"}, false},
		{"triton", []string{"triton,file=/tmp/t.json", "triton,log-frequency=50", "rate=100", "level=TIMESTAMPS", "level=TENSORS", "count=100"},
			Config{Level: traceTimestamps | traceTensors, Rate: 100, Count: 100, LogFrequency: 50, File: "/tmp/t.json", Mode: "triton"}, false},
		{"level off clears", []string{"level=TIMESTAMPS", "level=OFF"}, Config{Rate: 1000, Count: -1, Mode: "triton"}, false},
		{"opentelemetry", []string{"mode=opentelemetry", "opentelemetry,url=localhost:4318/v1/traces", "opentelemetry,resource=a=b"},
			Config{Rate: 1000, Count: -1, Mode: "opentelemetry", OTel: [][2]string{{"url", "localhost:4318/v1/traces"}, {"resource", "a=b"}}}, false},
		{"bad level", []string{"level=LOUD"}, Config{}, true},
		{"bad count", []string{"count=-2"}, Config{}, true},
		{"bad mode", []string{"mode=zipkin"}, Config{}, true},
		{"unknown triton setting", []string{"triton,url=x"}, Config{}, true},
		{"no value", []string{"rate"}, Config{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := DefaultConfig()
			var err error
			for _, s := range c.specs {
				if err = got.Parse(s); err != nil {
					break
				}
			}
			if (err != nil) != c.err {
				t.Fatalf("err = %v, want error %v", err, c.err)
			}
			if !c.err && (got.Level != c.want.Level || got.Rate != c.want.Rate || got.Count != c.want.Count ||
				got.LogFrequency != c.want.LogFrequency || got.File != c.want.File || got.Mode != c.want.Mode || len(got.OTel) != len(c.want.OTel)) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestTraceSampling checks rate, count and log frequency: every rate-th
// request is traced, count stops sampling and writes what was collected,
// and each log_frequency traces go to the next numbered file.
func TestTraceSampling(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "t.json")
	tr, err := New(Config{Level: traceTimestamps, Rate: 2, Count: 3, LogFrequency: 2, File: file, Mode: "triton"}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	traced := 0
	for range 10 {
		if rt := tr.start("m", 1, ""); rt != nil {
			traced++
			rt.End()
		}
	}
	if traced != 3 {
		t.Fatalf("%d traced, want 3 (every 2nd of 10, at most count)", traced)
	}
	tr.Close()
	for name, n := range map[string]int{"t.json.0": 2, "t.json.1": 1} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var recs []map[string]any
		if err := json.Unmarshal(b, &recs); err != nil {
			t.Fatalf("%s: %v: %s", name, err, b)
		}
		headers := 0
		for _, r := range recs {
			if r["model_name"] == "m" {
				headers++
			}
		}
		if headers != n {
			t.Errorf("%s holds %d traces, want %d", name, headers, n)
		}
	}
	if got := tr.Settings(""); got[2][1] != "0" {
		t.Errorf("trace_count after 3 traces: %v", got[2])
	}
	off, _ := New(DefaultConfig(), hclog.NewNullLogger(), nil)
	if off.start("m", 1, "") != nil {
		t.Fatal("level OFF traced a request")
	}
}
