package backendapi

import "time"

// Trace is the tracing of one sampled request (the trace extension). The
// front end that sampled the request sets InferRequest.Trace; the backend
// records when the request reached the points Triton's trace names, and the
// front end turns them into trace records or spans once Infer or
// InferStream has returned. An untraced request has a nil Trace, which the
// backend only compares with nil.
//
// The backend writes the fields before it delivers the request's final
// response, and does not touch them after; the front end reads them after
// the call returned.
type Trace struct {
	// QueueStart is when the request entered its model's queue.
	QueueStart time.Time
	// ComputeStart is when a stub was handed the request (its inputs are
	// in the stub's memory by then, so it is also the end of compute
	// input); ComputeOutputStart is when its first response arrived and
	// ComputeEnd when its final one did.
	ComputeStart, ComputeOutputStart, ComputeEnd time.Time
	// RequestEnd is when the backend finished with the request.
	RequestEnd time.Time

	// Set by the front end, read by the backend:

	// Context is the trace context the model sees (request.trace() in
	// Python, a JSON object such as {"traceparent": "..."}); a request the
	// model makes with it (BLS) joins this trace.
	Context string
	// Child starts the trace of a request that the model serving this one
	// makes with its trace context (BLS); computeStart is when this
	// request's execute began, or zero for a step of an ensemble (whose
	// spans then go under the ensemble's model span). The backend calls
	// the child's End once that request is over.
	Child func(model string, version int64, computeStart time.Time) *Trace
	// End, set on a child trace, completes it.
	End func()
}
