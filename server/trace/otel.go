package trace

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// otelTracer exports traces as OpenTelemetry spans over OTLP/HTTP with the
// official Go SDK and a batch span processor, as Triton's opentelemetry
// mode does. A trace is a span "InferRequest" (the front end: receive and
// send events), its child named after the model (REQUEST_START to
// REQUEST_END, with Triton's triton.* attributes), and under that a "queue"
// span (queued until a stub took the request) and a "compute" span (the
// stub's execute). A request that carries a W3C traceparent continues the
// client's trace.
type otelTracer struct {
	tp *sdktrace.TracerProvider
	tr trace.Tracer
}

// traceContext is the W3C Trace Context propagator (traceparent).
var traceContext = propagation.TraceContext{}

func newOTelTracer(opts [][2]string) (*otelTracer, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", "triton-inference-server")}
	var bsp []sdktrace.BatchSpanProcessorOption
	var url string
	for _, kv := range otelSettings(opts) {
		k, v := kv[0], kv[1]
		switch k {
		case "url":
			url = v
		case "resource":
			for _, r := range strings.Split(v, ",") {
				rk, rv, ok := strings.Cut(r, "=")
				if !ok {
					return nil, fmt.Errorf("trace-config: opentelemetry resource %q: expected key=value", r)
				}
				attrs = append(attrs, attribute.String(rk, rv))
			}
		default:
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("trace-config: opentelemetry %s: expected a positive integer, got %q", k, v)
			}
			switch k {
			case "bsp_max_queue_size":
				bsp = append(bsp, sdktrace.WithMaxQueueSize(n))
			case "bsp_schedule_delay":
				bsp = append(bsp, sdktrace.WithBatchTimeout(time.Duration(n)*time.Millisecond))
			case "bsp_max_export_batch_size":
				bsp = append(bsp, sdktrace.WithMaxExportBatchSize(n))
			}
		}
	}
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(url))
	if err != nil {
		return nil, fmt.Errorf("trace-config: opentelemetry exporter: %w", err)
	}
	res := resource.NewWithAttributes("", attrs...)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, bsp...), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()))
	return &otelTracer{tp: tp, tr: tp.Tracer("triton-server")}, nil
}

// close flushes the spans still batched (bounded by 5 s).
func (o *otelTracer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.tp.Shutdown(ctx)
}

// otelSpans are the spans of a trace that stay open while the request
// runs: the model's span is the parent of its BLS requests' spans (under
// the compute span, started when the first of them arrives).
type otelSpans struct {
	mu                   sync.Mutex
	root, model, compute trace.Span
	modelCtx, computeCtx context.Context
}

// begin opens the spans of a request being submitted (REQUEST_START is its
// last stamp): under parent when it is a BLS request, else an
// "InferRequest" span continuing the client's traceparent, if any. The
// model span's context becomes the request's trace context.
func (o *otelTracer) begin(rt *Request, parent context.Context) {
	s := &rt.otel
	start := rt.stamps[len(rt.stamps)-1].t
	ctx := parent
	if ctx == nil {
		ctx = context.Background()
		if rt.parent != "" {
			ctx = traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": rt.parent})
		}
		ctx, s.root = o.tr.Start(ctx, "InferRequest", trace.WithTimestamp(rt.stamps[0].t), trace.WithSpanKind(trace.SpanKindServer))
	}
	attrs := []attribute.KeyValue{attribute.String("triton.model_name", rt.model),
		attribute.Int64("triton.model_version", rt.version), attribute.Int64("triton.trace_id", int64(rt.id)),
		attribute.Int64("triton.trace_parent_id", int64(rt.parentID))}
	if rt.requestID != "" {
		attrs = append(attrs, attribute.String("triton.request_id", rt.requestID))
	}
	s.modelCtx, s.model = o.tr.Start(ctx, rt.model, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrs...))
	sc := s.model.SpanContext()
	rt.bt.Context = `{"traceparent":"00-` + sc.TraceID().String() + "-" + sc.SpanID().String() + `-01"}`
}

// computeContext returns the context of the compute span, starting it at
// start if it is not open yet.
func (s *otelSpans) computeContext(o *otelTracer, start time.Time) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.compute == nil && s.modelCtx != nil {
		if start.IsZero() {
			start = time.Now()
		}
		s.computeCtx, s.compute = o.tr.Start(s.modelCtx, "compute", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer))
	}
	if s.computeCtx == nil {
		return s.modelCtx
	}
	return s.computeCtx
}

// export completes the spans of a finished trace: the queue span, the
// compute span, the events, and the ends.
func (o *otelTracer) export(rt *Request) {
	s := &rt.otel
	if s.model == nil || len(rt.stamps) == 0 {
		return
	}
	bt := &rt.bt
	if !bt.QueueStart.IsZero() && !bt.ComputeStart.IsZero() {
		_, q := o.tr.Start(s.modelCtx, "queue", trace.WithTimestamp(bt.QueueStart))
		q.End(trace.WithTimestamp(bt.ComputeStart))
	}
	if !bt.ComputeStart.IsZero() {
		s.computeContext(o, bt.ComputeStart)
	}
	s.mu.Lock()
	compute := s.compute
	s.mu.Unlock()
	end := time.Now()
	for _, st := range rt.stamps {
		span := s.root
		switch st.name {
		case "REQUEST_START", "QUEUE_START", "INFER_RESPONSE_COMPLETE", "REQUEST_END":
			span = s.model
		case "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END":
			if compute != nil {
				span = compute
			}
		}
		if st.name == "REQUEST_END" {
			end = st.t
		}
		if span == nil {
			span = s.model
		}
		span.AddEvent(st.name, trace.WithTimestamp(st.t))
	}
	if compute != nil {
		ce := bt.ComputeEnd
		if ce.IsZero() {
			ce = end
		}
		compute.End(trace.WithTimestamp(ce))
	}
	s.model.End(trace.WithTimestamp(end))
	if s.root != nil {
		s.root.End(trace.WithTimestamp(rt.stamps[len(rt.stamps)-1].t))
	}
}
