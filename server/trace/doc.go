// Package trace is the trace extension (extension_trace.md,
// user_guide/trace.md): the global settings from --trace-config, the
// per-model settings of /v2[/models/{m}]/trace/setting and the
// TraceSetting RPC, and sampling. A sampled request gets a Request that
// the front ends fill and that ends as Triton's JSON records in the trace
// file or as OpenTelemetry spans. While every level is OFF the only cost
// on a request is one atomic load. It knows the backend only as
// backendapi; the front ends (package server) own the endpoints and hand
// the tracer their JSON writers.
//
// # Files, one job each
//
//	doc.go          this description
//	config.go       Config: --trace-config parsed, Triton's defaults
//	tracer.go       Tracer: sampling, the settings and their updates (Update, Apply, Settings)
//	start.go        a request's trace started from HTTP headers or gRPC metadata
//	record.go       Request: one sampled request's stamps and tensors; the trace files
//	otel.go         the OpenTelemetry mode: spans and their export
//
// # Goroutines
//
// None of its own. In OpenTelemetry mode the SDK's batch span processor
// exports on its goroutine, ended by Tracer.Close (at server shutdown).
//
// # Lock order
//
//  1. Tracer.mu: the settings, the sampling counters, trace ids.
//  2. traceFiles.mu: the open trace files and their buffered records.
//  3. otelSpans.mu: one request's open spans.
//
// Each is a leaf in practice: none is held while taking another, nor
// across a call into the front end.
package trace
