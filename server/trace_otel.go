package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// export turns a finished trace into spans.
func (o *otelTracer) export(rt *reqTrace) {
	ctx := context.Background()
	if rt.parent != "" {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": rt.parent})
	}
	if len(rt.stamps) == 0 {
		return
	}
	first, last := rt.stamps[0].t, rt.stamps[len(rt.stamps)-1].t
	ctx, root := o.tr.Start(ctx, "InferRequest", trace.WithTimestamp(first), trace.WithSpanKind(trace.SpanKindServer))
	at := func(name string) time.Time {
		for _, s := range rt.stamps {
			if s.name == name {
				return s.t
			}
		}
		return time.Time{}
	}
	start, end := at("REQUEST_START"), at("REQUEST_END")
	modelAttrs := []attribute.KeyValue{attribute.String("triton.model_name", rt.model),
		attribute.Int64("triton.model_version", rt.version), attribute.Int64("triton.trace_id", int64(rt.id)),
		attribute.Int64("triton.trace_parent_id", 0)}
	if rt.requestID != "" {
		modelAttrs = append(modelAttrs, attribute.String("triton.request_id", rt.requestID))
	}
	mctx, model := o.tr.Start(ctx, rt.model, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(modelAttrs...))
	bt := &rt.bt
	if !bt.QueueStart.IsZero() && !bt.ComputeStart.IsZero() {
		_, q := o.tr.Start(mctx, "queue", trace.WithTimestamp(bt.QueueStart))
		q.End(trace.WithTimestamp(bt.ComputeStart))
	}
	var compute trace.Span
	if !bt.ComputeStart.IsZero() {
		_, compute = o.tr.Start(mctx, "compute", trace.WithTimestamp(bt.ComputeStart), trace.WithSpanKind(trace.SpanKindServer))
	}
	for _, s := range rt.stamps {
		span := root
		switch s.name {
		case "REQUEST_START", "QUEUE_START", "INFER_RESPONSE_COMPLETE", "REQUEST_END":
			span = model
		case "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END":
			if compute != nil {
				span = compute
			}
		}
		span.AddEvent(s.name, trace.WithTimestamp(s.t))
	}
	if compute != nil {
		compute.End(trace.WithTimestamp(bt.ComputeEnd))
	}
	model.End(trace.WithTimestamp(end))
	root.End(trace.WithTimestamp(last))
}
