package trace

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
)

// traceStamp is one named point in a request's life.
type traceStamp struct {
	name string
	t    time.Time
}

// Request is one sampled request. Its methods are nil-safe, so a front end
// calls them on every request and they cost nothing when it is not traced.
type Request struct {
	t         *Tracer
	id        uint64
	level     int
	freq      uint32
	last      bool // the scope's count reached 0 with this trace
	file      string
	model     string
	version   int64
	requestID string
	parent    string // the client's W3C traceparent
	bt        backendapi.Trace
	stamps    []traceStamp
	tensors   []byte // TENSORS records, each preceded by ','
	parentID  uint64 // the trace of the request whose model made this one (BLS)
	otel      otelSpans
}

func (rt *Request) begin() { rt.stamps = make([]traceStamp, 0, 12) }

// Stamp records a front-end timestamp (HTTP_RECV_START, GRPC_SEND_END...).
func (rt *Request) Stamp(name string) {
	if rt != nil {
		rt.stamps = append(rt.stamps, traceStamp{name, time.Now()})
	}
}

// Submit attaches the trace to req just before the backend gets it: it
// stamps REQUEST_START and, at TENSORS level, records the inputs.
func (rt *Request) Submit(req *backendapi.InferRequest) {
	if rt == nil {
		return
	}
	rt.requestID = req.ID
	req.Trace = &rt.bt
	rt.bt.Child = rt.child
	rt.Stamp("REQUEST_START")
	if rt.t.otel != nil {
		rt.t.otel.begin(rt, nil)
	} else {
		rt.bt.Context = `{"triton_trace_id":"` + strconv.FormatUint(rt.id, 10) + `"}`
	}
	if rt.level&traceTensors != 0 {
		for i := range req.Inputs {
			in := &req.Inputs[i]
			rt.tensor("TENSOR_QUEUE_INPUT", in.Name, in.DataType, in.Shape, in.Data)
		}
	}
}

// Response stamps INFER_RESPONSE_COMPLETE and, at TENSORS level, records
// the outputs of resp.
func (rt *Request) Response(resp *backendapi.InferResponse) {
	if rt == nil {
		return
	}
	if rt.level&traceTensors != 0 && resp != nil {
		for i := range resp.Outputs {
			o := &resp.Outputs[i]
			rt.tensor("TENSOR_BACKEND_OUTPUT", o.Name, o.DataType, o.Shape, o.Data)
		}
	}
	rt.Stamp("INFER_RESPONSE_COMPLETE")
}

func (rt *Request) tensor(activity, name string, dt backendapi.DataType, shape []int64, data []byte) {
	b := rt.tensors
	b = append(b, `,{"id":`...)
	b = strconv.AppendUint(b, rt.id, 10)
	b = append(b, `,"activity":"`...)
	b = append(b, activity...)
	b = append(b, `","tensor":{"name":`...)
	b = rt.t.json.String(b, name)
	var vals []byte
	if data != nil {
		if v, err := rt.t.json.Data(nil, name, dt, data, shape); err == nil && len(v) >= 2 {
			vals = v[1 : len(v)-1]
		}
	}
	b = append(b, `,"data":`...)
	b = rt.t.json.String(b, string(vals))
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	b = append(b, `,"shape":`...)
	b = rt.t.json.String(b, strings.Join(dims, ","))
	b = append(b, `,"dtype":"`...)
	b = append(b, dt.String()...)
	rt.tensors = append(b, `"}}`...)
}

// End completes the trace once the request is over: the backend's
// timestamps join the front end's, and the whole goes to the trace file or
// to the OpenTelemetry exporter.
func (rt *Request) End() {
	if rt == nil {
		return
	}
	bt := &rt.bt
	for _, s := range []traceStamp{{"QUEUE_START", bt.QueueStart}, {"COMPUTE_START", bt.ComputeStart},
		{"COMPUTE_INPUT_END", bt.ComputeStart}, {"COMPUTE_OUTPUT_START", bt.ComputeOutputStart},
		{"COMPUTE_END", bt.ComputeEnd}, {"REQUEST_END", bt.RequestEnd}} {
		if !s.t.IsZero() {
			rt.stamps = append(rt.stamps, s)
		}
	}
	if bt.RequestEnd.IsZero() {
		rt.stamps = append(rt.stamps, traceStamp{"REQUEST_END", time.Now()})
	}
	slices.SortStableFunc(rt.stamps, func(a, b traceStamp) int { return a.t.Compare(b.t) })
	if rt.t.otel != nil {
		rt.t.otel.export(rt)
		return
	}
	if rt.level&traceTimestamps == 0 {
		rt.stamps = nil
	}
	rt.t.files.add(rt.file, rt.records(), rt.freq, rt.last)
}

// records is the trace as Triton writes it: a header naming the model,
// one object per timestamp, one per tensor, comma-separated.
func (rt *Request) records() []byte {
	id := strconv.AppendUint(nil, rt.id, 10)
	b := append([]byte(`{"id":`), id...)
	b = append(b, `,"model_name":`...)
	b = rt.t.json.String(b, rt.model)
	b = append(b, `,"model_version":`...)
	b = strconv.AppendInt(b, rt.version, 10)
	if rt.requestID != "" {
		b = append(b, `,"request_id":`...)
		b = rt.t.json.String(b, rt.requestID)
	}
	if rt.parentID != 0 {
		b = append(b, `,"parent_id":`...)
		b = strconv.AppendUint(b, rt.parentID, 10)
	}
	b = append(b, '}')
	for _, s := range rt.stamps {
		b = append(b, `,{"id":`...)
		b = append(b, id...)
		b = append(b, `,"timestamps":[{"name":"`...)
		b = append(b, s.name...)
		b = append(b, `","ns":`...)
		b = strconv.AppendInt(b, s.t.UnixNano(), 10)
		b = append(b, "}]}"...)
	}
	return append(b, rt.tensors...)
}

// child starts the trace of a request the model serving rt makes with its
// trace context (BLS): a trace of its own, with rt as its parent, in the
// same file or under rt's compute span.
func (rt *Request) child(model string, version int64, computeStart time.Time) *backendapi.Trace {
	t := rt.t
	t.mu.Lock()
	t.nextID++
	c := &Request{t: t, id: t.nextID, level: rt.level, freq: rt.freq, file: rt.file, model: model, version: version, parentID: rt.id}
	t.mu.Unlock()
	if c.version == 0 {
		c.version = -1
	}
	c.begin()
	c.Stamp("REQUEST_START")
	c.bt.Child = c.child
	c.bt.End = c.End
	if t.otel != nil {
		parent := rt.otel.modelCtx
		if !computeStart.IsZero() {
			parent = rt.otel.computeContext(t.otel, computeStart)
		}
		t.otel.begin(c, parent)
	} else {
		c.bt.Context = `{"triton_trace_id":"` + strconv.FormatUint(c.id, 10) + `"}`
	}
	return &c.bt
}

// traceFiles collects the traces of each trace file and writes them: every
// log_frequency traces to "<file>.<n>", when a count runs out, and at
// shutdown (to "<file>" itself when it was never split).
type traceFiles struct {
	mu   sync.Mutex
	open map[string]*traceFile
	log  hclog.Logger
}

type traceFile struct {
	traces [][]byte
	next   int  // index of the next "<file>.<n>"
	split  bool // written by log frequency or count
}

func (f *traceFiles) add(path string, trace []byte, freq uint32, last bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tf := f.open[path]
	if tf == nil {
		tf = &traceFile{}
		f.open[path] = tf
	}
	tf.traces = append(tf.traces, trace)
	if freq > 0 && len(tf.traces) >= int(freq) || last {
		f.write(path+"."+strconv.Itoa(tf.next), tf.traces)
		tf.next++
		tf.split = true
		tf.traces = nil
	}
}

func (f *traceFiles) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for path, tf := range f.open {
		if len(tf.traces) == 0 {
			continue
		}
		if tf.split {
			path += "." + strconv.Itoa(tf.next)
		}
		f.write(path, tf.traces)
		tf.traces = nil
	}
}

func (f *traceFiles) write(path string, traces [][]byte) {
	b := []byte{'['}
	for i, t := range traces {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, t...)
	}
	b = append(b, ']')
	if err := os.WriteFile(path, b, 0o644); err != nil {
		f.log.Error("writing the trace file failed", "file", path, "error", err)
	}
}
