package trace

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
)

// Trace levels, a bit mask as in TRITONSERVER_InferenceTraceLevel.
const (
	traceTimestamps = 1
	traceTensors    = 2
)

// Trace modes.
const (
	traceModeTriton = "triton"
	traceModeOTel   = "opentelemetry"
)

// traceScope is the settings of the server (global) or of one model, with
// its sampling state. A model scope sets only some fields itself; the
// others follow the global scope.
type traceScope struct {
	level        int
	rate         uint32
	count        int32
	logFrequency uint32
	has          [4]bool // level, rate, count, log frequency set here
	seen         uint64  // requests offered for sampling
}

const (
	hasLevel = iota
	hasRate
	hasCount
	hasFreq
)

// Tracer samples requests and keeps the settings.
type Tracer struct {
	on     atomic.Bool // some scope's level is not OFF
	mu     sync.Mutex
	global traceScope
	models map[string]*traceScope
	file   string
	mode   string
	nextID uint64
	files  *traceFiles
	otel   *otelTracer
	log    hclog.Logger
	opts   [][2]string // opentelemetry settings, reported by the endpoints
	json   JSON
}

// JSON writes what a trace record shares with the front end's responses:
// a string, and a tensor's data as a JSON array (flat, as Triton writes
// it), so that the two read alike.
type JSON interface {
	String(dst []byte, s string) []byte
	Data(dst []byte, name string, dt backendapi.DataType, data []byte, shape []int64) ([]byte, error)
}

// stdJSON is encoding/json's way, for a tracer given no JSON writer.
type stdJSON struct{}

func (stdJSON) String(dst []byte, s string) []byte {
	b, _ := json.Marshal(s)
	return append(dst, b...)
}

func (stdJSON) Data(dst []byte, name string, dt backendapi.DataType, data []byte, shape []int64) ([]byte, error) {
	return append(dst, "[]"...), nil
}

// New starts a tracer with the settings of c, writing records with js
// (nil: encoding/json, and no tensor data).
func New(c Config, log hclog.Logger, js JSON) (*Tracer, error) {
	if js == nil {
		js = stdJSON{}
	}
	t := &Tracer{json: js,
		global: traceScope{level: c.Level, rate: c.Rate, count: c.Count, logFrequency: c.LogFrequency, has: [4]bool{true, true, true, true}},
		models: map[string]*traceScope{}, file: c.File, mode: c.Mode, log: log, opts: c.OTel,
		files: &traceFiles{open: map[string]*traceFile{}, log: log},
	}
	if t.mode == "" {
		t.mode = traceModeTriton
	}
	if t.mode == traceModeOTel {
		var err error
		if t.otel, err = newOTelTracer(c.OTel); err != nil {
			return nil, err
		}
	}
	t.refresh()
	return t, nil
}

// refresh recomputes the on flag; t.mu is held or t is not shared yet.
func (t *Tracer) refresh() {
	on := t.global.level != 0
	for _, m := range t.models {
		on = on || m.has[hasLevel] && m.level != 0
	}
	t.on.Store(on)
}

// effective returns the scope that owns each setting for model.
func (t *Tracer) effective(model string) (level int, rate *traceScope, count *traceScope, freq uint32) {
	m := t.models[model]
	pick := func(i int) *traceScope {
		if m != nil && m.has[i] {
			return m
		}
		return &t.global
	}
	return pick(hasLevel).level, pick(hasRate), pick(hasCount), pick(hasFreq).logFrequency
}

// start decides whether a request to model is traced and returns its
// trace, or nil. parent is the W3C traceparent the client sent, if any: in
// OpenTelemetry mode such a request is traced whatever the rate.
func (t *Tracer) start(model string, version int64, parent string) *Request {
	if t == nil || !t.on.Load() {
		return nil
	}
	t.mu.Lock()
	level, rs, cs, freq := t.effective(model)
	sampled := false
	if level != 0 && cs.count != 0 {
		rs.seen++
		sampled = rs.rate != 0 && rs.seen%uint64(rs.rate) == 0 || parent != "" && t.otel != nil
	}
	if !sampled || t.mode == traceModeTriton && t.file == "" {
		t.mu.Unlock()
		return nil
	}
	last := false
	if cs.count > 0 {
		cs.count--
		last = cs.count == 0
	}
	t.nextID++
	if version == 0 {
		version = -1 // Triton's "no version given"
	}
	rt := &Request{t: t, id: t.nextID, level: level, freq: freq, last: last, file: t.file,
		model: model, version: version, parent: parent}
	t.mu.Unlock()
	rt.begin()
	return rt
}

// Close writes what the trace files still hold and flushes spans.
func (t *Tracer) Close() {
	if t == nil {
		return
	}
	t.files.close()
	if t.otel != nil {
		t.otel.close()
	}
}

// Update is one settings update from an endpoint: for each setting,
// absent, null (clear: follow the global setting) or a value.
type Update struct {
	HasLevel, hasRate, hasCount, hasFreq         bool
	ClearLevel, clearRate, clearCount, clearFreq bool
	LevelValues                                  []string
	rate, count, freq                            *string // the values given (nil when absent or null)
}

// Scalar points at the fields of one single-valued setting of a
// Update, so that the HTTP and gRPC front ends fill them the same way.
type Scalar struct {
	Key        string
	Has, Clear *bool
	Val        **string
}

// ScalarSettings lists the single-valued settings (all but trace_level).
func (u *Update) ScalarSettings() []Scalar {
	return []Scalar{
		{"trace_rate", &u.hasRate, &u.clearRate, &u.rate},
		{"trace_count", &u.hasCount, &u.clearCount, &u.count},
		{"log_frequency", &u.hasFreq, &u.clearFreq, &u.freq},
	}
}

// Apply validates and applies an update to the global or a model's scope.
func (t *Tracer) Apply(model string, u *Update) error {
	var level int
	if u.HasLevel && !u.ClearLevel {
		for _, v := range u.LevelValues {
			switch v {
			case "OFF":
				if len(u.LevelValues) != 1 {
					return invalidArg("Expect only one trace level 'OFF' is specified")
				}
			case "TIMESTAMPS":
				level |= traceTimestamps
			case "TENSORS":
				level |= traceTensors
			}
		}
	}
	rate, err := parseTraceNumber("trace_rate", u.rate, 0, math.MaxUint32)
	if err != nil {
		return err
	}
	count, err := parseTraceNumber("trace_count", u.count, -1, math.MaxInt32)
	if err != nil {
		return err
	}
	freq, err := parseTraceNumber("log_frequency", u.freq, 0, math.MaxUint32)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	sc := &t.global
	if model != "" {
		if sc = t.models[model]; sc == nil {
			sc = &traceScope{}
			t.models[model] = sc
		}
	}
	set := func(i int, has, clear bool, f func()) {
		switch {
		case !has:
		case clear && model != "":
			sc.has[i] = false
		case !clear:
			sc.has[i] = true
			f()
		}
	}
	set(hasLevel, u.HasLevel, u.ClearLevel, func() { sc.level = level })
	set(hasRate, u.hasRate, u.clearRate, func() { sc.rate, sc.seen = uint32(rate), 0 })
	set(hasCount, u.hasCount, u.clearCount, func() { sc.count = int32(count) })
	set(hasFreq, u.hasFreq, u.clearFreq, func() { sc.logFrequency = uint32(freq) })
	t.refresh()
	return nil
}

// parseTraceNumber parses a setting value (a string, as the protocol has
// them) with Triton's error texts.
func parseTraceNumber(name string, v *string, lo, hi int64) (int64, error) {
	if v == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(*v), 10, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, invalidArg("Unable to parse '%s', value is out of range [ %d, %d ], got: %s", name, lo, hi, *v)
		}
		return 0, invalidArg("Unable to parse '%s', got: %s", name, *v)
	}
	if name == "trace_count" && n < lo {
		return 0, invalidArg("Unable to parse 'trace_count'. Expecting value >= %d, got:%s", lo, *v)
	}
	if n < lo || n > hi {
		return 0, invalidArg("Unable to parse '%s', value is out of range [ %d, %d ], got: %s", name, lo, hi, *v)
	}
	return n, nil
}

// Settings returns the settings of model (or the global ones) as the
// endpoints report them: name to one or more values.
func (t *Tracer) Settings(model string) [][2]any {
	t.mu.Lock()
	level, rs, cs, freq := t.effective(model)
	rate, count := rs.rate, cs.count
	t.mu.Unlock()
	var levels []string
	if level == 0 {
		levels = []string{"OFF"}
	}
	if level&traceTimestamps != 0 {
		levels = append(levels, "TIMESTAMPS")
	}
	if level&traceTensors != 0 {
		levels = append(levels, "TENSORS")
	}
	out := [][2]any{{"trace_level", levels}, {"trace_rate", strconv.FormatUint(uint64(rate), 10)},
		{"trace_count", strconv.FormatInt(int64(count), 10)}}
	if t.mode == traceModeTriton {
		out = append(out, [2]any{"log_frequency", strconv.FormatUint(uint64(freq), 10)}, [2]any{"trace_file", t.file})
	}
	out = append(out, [2]any{"trace_mode", t.mode})
	if t.mode == traceModeOTel {
		for _, kv := range otelSettings(t.opts) {
			out = append(out, [2]any{kv[0], kv[1]})
		}
	}
	return out
}

// otelSettings returns the opentelemetry settings with their defaults,
// sorted by name; resources are joined with commas.
func otelSettings(opts [][2]string) [][2]string {
	m := map[string]string{"url": "http://localhost:4318/v1/traces", "bsp_max_queue_size": "2048",
		"bsp_schedule_delay": "5000", "bsp_max_export_batch_size": "512"}
	var res []string
	for _, kv := range opts {
		if kv[0] == "resource" {
			res = append(res, kv[1])
			continue
		}
		m[kv[0]] = kv[1]
	}
	if len(res) > 0 {
		m["resource"] = strings.Join(res, ",")
	}
	out := make([][2]string, 0, len(m))
	for k, v := range m {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// ModelCheck is Triton's check of the model named by a model trace
// setting request: it must be ready.
func ModelCheck(err error, model string) error {
	if err != nil {
		return backendapi.Errorf(backendapi.InvalidArg, "Request for unknown model : %s", model)
	}
	return nil
}

func invalidArg(format string, args ...any) error {
	return backendapi.Errorf(backendapi.InvalidArg, format, args...)
}
