package ipc

import (
	"testing"
)

// A traced request carries its trace context as a tenth element, after
// the output targets (nil when there are none).
func TestTraceContextRoundTrip(t *testing.T) {
	req := func(targets []OutputTarget, trace string) Request {
		return Request{Handle: 4, ID: "r", CorrelationID: uint64(0), ParametersJSON: "{}", RequestedOutputs: []string{},
			Inputs: []Tensor{}, OutputTargets: targets, TraceContext: trace}
	}
	cases := map[string]Message{
		"execute traced":              &ExecuteMsg{BatchID: 1, Requests: []Request{req(nil, `{"traceparent":"00-ab-cd-01"}`)}},
		"execute traced with targets": &ExecuteMsg{BatchID: 2, Requests: []Request{req([]OutputTarget{{Name: "O", RegionID: 1, Offset: 8, Size: 4}}, "t")}},
		"execute untraced":            &ExecuteMsg{BatchID: 3, Requests: []Request{req(nil, "")}},
		"bls traced":                  &InferExecMsg{ID: 5, ModelName: "m", ModelVersion: -1, Request: req(nil, "ctx")},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) { checkRoundTrip(t, m) })
	}
}
