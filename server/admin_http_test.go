package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stubvisor/stubvisor/backendapi"
)

func TestRepository(t *testing.T) {
	ts := newTestServer(t, Options{})
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		reply  string
	}{
		{"index", "/v2/repository/index", "", 200,
			`[{"name":"add_sub","version":"1","state":"READY"},{"name":"broken","version":"1","state":"UNAVAILABLE","reason":"load failed"},{"name":"never"}]`},
		{"index ready", "/v2/repository/index", `{"ready":true}`, 200, `[{"name":"add_sub","version":"1","state":"READY"}]`},
		{"index bad ready", "/v2/repository/index", `{"ready":"yes"}`, 400, errorBody("Invalid value for 'ready': expected a boolean")},
		{"index bad json", "/v2/repository/index", `{"ready":`, 400, errorBody("failed to parse the request JSON buffer: Invalid value. at 9")},
		{"load", "/v2/repository/models/add_sub/load", "", 200, ""},
		{"load with files", "/v2/repository/models/m%2F1/load",
			`{"parameters":{"config":"{\"backend\":\"python\"}","file:1/model.py":"` + base64.StdEncoding.EncodeToString([]byte("print(1)\n")) + `","other":5}}`, 200, ""},
		{"load failure", "/v2/repository/models/broken/load", "", 400, errorBody("failed to load 'broken': no model.py")},
		{"load bad base64", "/v2/repository/models/x/load", `{"parameters":{"config":"{}","file:1/model.py":"!!!"}}`, 400, "*"},
		{"load config not string", "/v2/repository/models/x/load", `{"parameters":{"config":{}}}`, 400, errorBody("attempt to access JSON non-string as string")},
		{"load with repository name", "/v2/repository/repo/models/x/load", "", 501, errorBody("'repository_name' specification is not supported")},
		{"unload", "/v2/repository/models/add_sub/unload", `{"parameters":{"unload_dependents":true}}`, 200, ""},
		{"unload bad flag", "/v2/repository/models/add_sub/unload", `{"parameters":{"unload_dependents":1}}`, 500,
			errorBody("Unable to parse 'unload_dependents': attempt to access JSON non-boolean as boolean")},
		{"bad action", "/v2/repository/models/add_sub/reload", "", 404, errorBody("Not Found")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r := ts.do(t, "POST", tc.path, body, nil)
			if r.status != tc.status || (tc.reply != "*" && string(r.body) != tc.reply) {
				t.Fatalf("got %d %s\nwant %d %s", r.status, r.body, tc.status, tc.reply)
			}
		})
	}
	if r := ts.do(t, "GET", "/v2/repository/index", nil, nil); r.status != 405 {
		t.Fatalf("GET index: %d", r.status)
	}
	ts.b.mu.Lock()
	defer ts.b.mu.Unlock()
	if len(ts.b.loads) != 3 || ts.b.loads[1].name != "m/1" || ts.b.loads[1].opts.ConfigJSON != `{"backend":"python"}` ||
		string(ts.b.loads[1].opts.Files["file:1/model.py"]) != "print(1)\n" || len(ts.b.loads[1].opts.Files) != 1 {
		t.Fatalf("loads = %+v", ts.b.loads)
	}
	if len(ts.b.unloads) != 1 || ts.b.unloads[0] != (unloadCall{"add_sub", true}) {
		t.Fatalf("unloads = %+v", ts.b.unloads)
	}
}

func TestSharedMemoryEndpoints(t *testing.T) {
	ts := newTestServer(t, Options{})
	handle := base64.StdEncoding.EncodeToString(make([]byte, 64))
	steps := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		reply  string
	}{
		{"empty status", "GET", "/v2/systemsharedmemory/status", "", 200, `[]`},
		{"register", "POST", "/v2/systemsharedmemory/region/in0/register", `{"key":"/in0","offset":0,"byte_size":64}`, 200, ""},
		{"register without offset", "POST", "/v2/systemsharedmemory/region/in1/register", `{"key":"/in1","byte_size":32}`, 200, ""},
		{"register twice", "POST", "/v2/systemsharedmemory/region/in0/register", `{"key":"/in0","byte_size":64}`, 400,
			errorBody("shared memory region 'in0' already in manager")},
		{"register without name", "POST", "/v2/systemsharedmemory/register", `{"key":"/k","byte_size":1}`, 400,
			errorBody("'region name' is necessary to register system shared memory region")},
		{"register without key", "POST", "/v2/systemsharedmemory/region/r/register", `{"byte_size":1}`, 400,
			errorBody("Shared memory register request has no 'key' field")},
		{"register without size", "POST", "/v2/systemsharedmemory/region/r/register", `{"key":"/k"}`, 400,
			errorBody("Shared memory register request has no 'byte_size' field")},
		{"register bad size", "POST", "/v2/systemsharedmemory/region/r/register", `{"key":"/k","byte_size":-1}`, 400,
			errorBody("attempt to access JSON non-unsigned-integer as unsigned-integer")},
		{"register empty body", "POST", "/v2/systemsharedmemory/region/r/register", "", 400,
			errorBody("failed to parse the request JSON buffer: The document is empty. at 0")},
		{"status one", "GET", "/v2/systemsharedmemory/region/in1/status", "", 200, `[{"name":"in1","key":"/in1","offset":0,"byte_size":32}]`},
		{"status unknown", "GET", "/v2/systemsharedmemory/region/zz/status", "", 404, errorBody("Unable to find system shared memory region: 'zz'")},
		{"status all", "GET", "/v2/systemsharedmemory/status", "", 200,
			`[{"name":"in0","key":"/in0","offset":0,"byte_size":64},{"name":"in1","key":"/in1","offset":0,"byte_size":32}]`},
		{"status wrong method", "POST", "/v2/systemsharedmemory/status", "", 405, errorBody("Method Not Allowed")},
		{"register wrong method", "GET", "/v2/systemsharedmemory/region/x/register", "", 405, errorBody("Method Not Allowed")},
		{"unregister one", "POST", "/v2/systemsharedmemory/region/in0/unregister", "", 200, ""},
		{"unregister all", "POST", "/v2/systemsharedmemory/unregister", "", 200, ""},
		{"status after", "GET", "/v2/systemsharedmemory/status", "", 200, `[]`},
		{"bad action", "GET", "/v2/systemsharedmemory/region/x/peek", "", 404, errorBody("Not Found")},
		{"cuda register", "POST", "/v2/cudasharedmemory/region/g0/register", `{"raw_handle":{"b64":"` + handle + `"},"device_id":0,"byte_size":1024}`, 200, ""},
		{"cuda status", "GET", "/v2/cudasharedmemory/status", "", 200, `[{"name":"g0","device_id":0,"byte_size":1024}]`},
		{"cuda short handle", "POST", "/v2/cudasharedmemory/region/g1/register", `{"raw_handle":{"b64":"AAAA"},"device_id":0,"byte_size":1}`, 400,
			errorBody("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")},
		{"cuda no handle", "POST", "/v2/cudasharedmemory/region/g1/register", `{"device_id":0,"byte_size":1}`, 400,
			errorBody("Shared memory register request has no 'raw_handle' field")},
		{"cuda no device", "POST", "/v2/cudasharedmemory/region/g1/register", `{"raw_handle":{"b64":"` + handle + `"},"byte_size":1}`, 400,
			errorBody("attempt to access non-existing object member 'device_id'")},
		{"cuda no name", "POST", "/v2/cudasharedmemory/register", `{}`, 400,
			errorBody("'region name' is necessary to register cuda shared memory region")},
		{"cuda unregister", "POST", "/v2/cudasharedmemory/region/g0/unregister", "", 200, ""},
	}
	for _, st := range steps {
		var body []byte
		if st.body != "" {
			body = []byte(st.body)
		}
		r := ts.do(t, st.method, st.path, body, nil)
		if r.status != st.status || string(r.body) != st.reply {
			t.Fatalf("%s: got %d %s\nwant %d %s", st.name, r.status, r.body, st.status, st.reply)
		}
	}
	ts.b.mu.Lock()
	ts.b.allowShm = false
	ts.b.mu.Unlock()
	r := ts.do(t, "POST", "/v2/systemsharedmemory/region/r/register", []byte(`{"key":"/k","byte_size":1}`), nil)
	if r.status != 501 || string(r.body) != errorBody(msgShmDisabled) {
		t.Fatalf("client shm disabled: %d %s", r.status, r.body)
	}
}

func TestLogging(t *testing.T) {
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: io.Discard})
	ts := newTestServer(t, Options{Logger: logger})
	full := func(info, warn, errOn bool, verbose int, format string) string {
		b, _ := json.Marshal(logSettingsJSON{LogInfo: info, LogWarning: warn, LogError: errOn, LogVerboseLevel: uint64(verbose), LogFormat: format})
		return string(b)
	}
	steps := []struct {
		name   string
		method string
		body   string
		status int
		reply  string
		level  hclog.Level
	}{
		{"initial", "GET", "", 200, full(true, true, true, 0, "default"), hclog.Info},
		{"verbose", "POST", `{"log_verbose_level":1}`, 200, full(true, true, true, 1, "default"), hclog.Debug},
		{"quiet", "POST", `{"log_verbose_level":0,"log_info":false,"log_warning":false,"log_format":"ISO8601"}`, 200, full(false, false, true, 0, "ISO8601"), hclog.Error},
		{"nulls ignored", "POST", `{"log_info":null,"log_file":null}`, 200, full(false, false, true, 0, "ISO8601"), hclog.Error},
		{"log file", "POST", `{"log_file":"/tmp/x"}`, 501, errorBody("log file location can not be updated through network protocol"), hclog.Error},
		{"bad format", "POST", `{"log_format":"json"}`, 503, errorBody("invalid argument for --log_format, got: json"), hclog.Error},
		{"bad type", "POST", `{"log_info":"yes"}`, 400, errorBody("attempt to access JSON non-boolean as boolean"), hclog.Error},
		{"bad type changes nothing", "POST", `{"log_info":true,"log_error":1}`, 400, errorBody("attempt to access JSON non-boolean as boolean"), hclog.Error},
		{"all off", "POST", `{"log_error":false}`, 200, full(false, false, false, 0, "ISO8601"), hclog.Off},
		{"wrong method", "PUT", "", 405, errorBody("Method Not Allowed"), hclog.Off},
	}
	for _, st := range steps {
		var body []byte
		if st.body != "" {
			body = []byte(st.body)
		}
		r := ts.do(t, st.method, "/v2/logging", body, nil)
		if r.status != st.status || string(r.body) != st.reply {
			t.Fatalf("%s: got %d %s\nwant %d %s", st.name, r.status, r.body, st.status, st.reply)
		}
		if got := logger.GetLevel(); got != st.level {
			t.Fatalf("%s: logger level %v, want %v", st.name, got, st.level)
		}
	}
}

func TestStubsAndStatusPage(t *testing.T) {
	ts := newTestServer(t, Options{})
	ts.b.stubs = sampleStubs()
	want := `[{"model":"add_sub","version":"1","state":"READY","stubs":[{"instance":"add_sub_0_0","kind":"python","pid":4242,"state":"ready",` +
		`"restarts":3,"last_exit_cause":"killed by signal 9","in_flight":1,"ring_depth_in":0,"ring_depth_out":0,"pool_bytes_in_use":1048576,` +
		`"pool_bytes_capacity":67108864,"pool_bytes_high_water":2097152,"executions":77,"requests":12,"rss_bytes":52428800,"cpu_seconds":1.5,` +
		`"open_fds":9,"threads":3,"recycles":2,"last_recycle_cause":"recycled: rss 2.1 GiB \u003e MAX_RSS_MB 2048","memory_limit":"4096 MiB (rlimit-data)",` +
		`"load_steps":{"environment_s":0.5,"interpreter_start_s":0.25,"imports_s":1,"initialize_s":2,"warmup_s":0},"heartbeat_age_ms":250,"uptime_s":90}]}]`
	for _, p := range []string{"/v2/stubs", "/v2/models/add_sub/stubs", "/v2/models/add_sub/versions/1/stubs"} {
		r := ts.do(t, "GET", p, nil, nil)
		if r.status != 200 || string(r.body) != want {
			t.Fatalf("%s: %d %s\nwant %s", p, r.status, r.body, want)
		}
	}
	// ?history=1 adds the version's samples (the status page's plots).
	withHistory := strings.TrimSuffix(want, "]}]") + `],"history":[{"t":1000,"requests":4,"latency_us":250,"rss":{"add_sub_0_0":52428800}}]}]`
	if r := ts.do(t, "GET", "/v2/stubs?history=1", nil, nil); r.status != 200 || string(r.body) != withHistory {
		t.Fatalf("with history: %d %s\nwant %s", r.status, r.body, withHistory)
	}
	if r := ts.do(t, "GET", "/v2/models/add_sub/versions/2/stubs", nil, nil); r.status != 200 || string(r.body) != `[]` {
		t.Fatalf("other version: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/v2/models/nope/stubs", nil, nil); r.status != 400 {
		t.Fatalf("unknown model: %d %s", r.status, r.body)
	}
	r := ts.do(t, "GET", "/", nil, nil)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("status page: %d %v", r.status, r.header)
	}
	page := string(r.body)
	for _, must := range []string{`fetch("/v2/stubs?history=1"`, `"data-instance"`, `"data-restarts"`, `"data-state"`, `setInterval(refresh, 1000)`} {
		if !strings.Contains(page, must) {
			t.Errorf("status page lacks %s", must)
		}
	}
	// The SVG namespace is a name, not an asset the page loads.
	local := strings.ReplaceAll(page, `"http://www.w3.org/2000/svg"`, "")
	for _, external := range []string{"http://", "https://", "<link", "src="} {
		if strings.Contains(local, external) {
			t.Errorf("status page refers to an external asset (%s)", external)
		}
	}
	if r := ts.do(t, "POST", "/", nil, nil); r.status != 405 {
		t.Fatalf("POST /: %d", r.status)
	}
}

func TestMetrics(t *testing.T) {
	ts := newTestServer(t, Options{})
	ts.b.stats = sampleStats()
	ts.b.stubs = sampleStubs()
	// A duplicate must not break the scrape.
	ts.b.stubs = append(ts.b.stubs, ts.b.stubs[0])
	ts.b.custom = []backendapi.MetricFamily{
		{Name: "requests_seen", Description: "Requests a model counted", Kind: backendapi.MetricCounter,
			Metrics: []backendapi.Metric{{Labels: map[string]string{"route": "a"}, Value: 3}, {Labels: map[string]string{"route": "b"}, Value: 4}}},
		{Name: "temperature", Description: "A gauge", Kind: backendapi.MetricGauge, Metrics: []backendapi.Metric{{Value: 21.5}}},
		{Name: "latency_seconds", Description: "A histogram", Kind: backendapi.MetricHistogram,
			Metrics: []backendapi.Metric{{Buckets: []float64{0.1, 1}, Counts: []uint64{2, 5}, Sum: 3.5, Count: 6}}},
		// Neither a reserved prefix nor an invalid name breaks the scrape.
		{Name: "nv_inference_count", Kind: backendapi.MetricGauge, Metrics: []backendapi.Metric{{Value: 1}}},
		{Name: "bad name", Kind: backendapi.MetricGauge, Metrics: []backendapi.Metric{{Value: 1}}},
	}
	r := ts.doURL(t, "GET", ts.metrics+"/metrics", nil, nil)
	if r.status != 200 {
		t.Fatalf("scrape: %d %s", r.status, r.body)
	}
	text := string(r.body)
	for _, line := range []string{
		`nv_inference_request_success{model="add_sub",version="1"} 10`,
		`nv_inference_request_failure{model="add_sub",reason="BACKEND",version="1"} 1`,
		`nv_inference_request_failure{model="add_sub",reason="REJECTED",version="1"} 1`,
		`nv_inference_request_failure{model="add_sub",reason="CANCELED",version="1"} 0`,
		`nv_inference_request_failure{model="add_sub",reason="OTHER",version="1"} 0`,
		`nv_inference_count{model="add_sub",version="1"} 12`,
		`nv_inference_exec_count{model="add_sub",version="1"} 7`,
		`nv_inference_request_duration_us{model="add_sub",version="1"} 6000`,
		`nv_inference_queue_duration_us{model="add_sub",version="1"} 300`,
		`nv_inference_compute_input_duration_us{model="add_sub",version="1"} 100`,
		`nv_inference_compute_infer_duration_us{model="add_sub",version="1"} 4000`,
		`nv_inference_compute_output_duration_us{model="add_sub",version="1"} 200`,
		`stubvisor_model_state{model="add_sub",state="READY",version="1"} 1`,
		`stubvisor_model_state{model="add_sub",state="UNAVAILABLE",version="1"} 0`,
		`stubvisor_stub_state{instance="add_sub_0_0",model="add_sub",state="ready",version="1"} 1`,
		`stubvisor_stub_state{instance="add_sub_0_0",model="add_sub",state="busy",version="1"} 0`,
		`stubvisor_stub_restarts_total{instance="add_sub_0_0",model="add_sub",version="1"} 3`,
		`stubvisor_stub_pool_bytes{instance="add_sub_0_0",kind="in_use",model="add_sub",version="1"} 1.048576e+06`,
		`stubvisor_stub_pool_bytes{instance="add_sub_0_0",kind="capacity",model="add_sub",version="1"} 6.7108864e+07`,
		`stubvisor_stub_in_flight{instance="add_sub_0_0",model="add_sub",version="1"} 1`,
		`stubvisor_stub_heartbeat_age_seconds{instance="add_sub_0_0",model="add_sub",version="1"} 0.25`,
		`stubvisor_stub_executions_total{instance="add_sub_0_0",model="add_sub",version="1"} 77`,
		`stubvisor_stub_requests{instance="add_sub_0_0",model="add_sub",version="1"} 12`,
		`stubvisor_stub_resident_memory_bytes{instance="add_sub_0_0",model="add_sub",version="1"} 5.24288e+07`,
		`stubvisor_stub_cpu_seconds_total{instance="add_sub_0_0",model="add_sub",version="1"} 1.5`,
		`stubvisor_stub_open_fds{instance="add_sub_0_0",model="add_sub",version="1"} 9`,
		`stubvisor_stub_threads{instance="add_sub_0_0",model="add_sub",version="1"} 3`,
		`stubvisor_stub_recycles_total{instance="add_sub_0_0",model="add_sub",version="1"} 2`,
		"# TYPE nv_inference_request_success counter",
		"go_goroutines ",
		"# HELP requests_seen Requests a model counted",
		"# TYPE requests_seen counter",
		`requests_seen{route="a"} 3`,
		`requests_seen{route="b"} 4`,
		"# TYPE temperature gauge",
		"temperature 21.5",
		"# TYPE latency_seconds histogram",
		`latency_seconds_bucket{le="0.1"} 2`,
		`latency_seconds_bucket{le="1"} 5`,
		`latency_seconds_bucket{le="+Inf"} 6`,
		"latency_seconds_sum 3.5",
		"latency_seconds_count 6",
		"# TYPE nv_inference_count counter",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
	if r := ts.doURL(t, "GET", ts.metrics+"/other", nil, nil); r.status != 404 {
		t.Fatalf("other path: %d", r.status)
	}
	if r := ts.doURL(t, "POST", ts.metrics+"/metrics", nil, nil); r.status != 405 {
		t.Fatalf("POST /metrics: %d", r.status)
	}
}

func TestServeShutdown(t *testing.T) {
	b := newTestBackend()
	s, err := New(b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	apiL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- s.Serve(apiL) }()
	go func() { done <- s.ServeMetrics(metL) }()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	for _, u := range []string{"http://" + apiL.Addr().String() + "/v2/health/live", "http://" + metL.Addr().String() + "/metrics"} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", u, resp.StatusCode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Serve returned %v after Shutdown, want nil", err)
			}
		case <-ctx.Done():
			t.Fatal("Serve did not return after Shutdown")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(l); !errors.Is(err, ErrClosed) {
		t.Fatalf("Serve after Shutdown = %v, want ErrClosed", err)
	}
}
