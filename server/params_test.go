package server

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
)

func TestApplyRequestParameter(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		value any
		want  backendapi.InferRequest
		err   string
	}{
		{"sequence id uint", "sequence_id", uint64(math.MaxUint64), backendapi.InferRequest{CorrelationID: backendapi.CorrelationID{Uint: math.MaxUint64}}, ""},
		{"sequence id int", "sequence_id", int64(7), backendapi.InferRequest{CorrelationID: backendapi.CorrelationID{Uint: 7}}, ""},
		{"sequence id string", "sequence_id", "abc", backendapi.InferRequest{CorrelationID: backendapi.CorrelationID{String: "abc", IsText: true}}, ""},
		{"sequence id negative", "sequence_id", int64(-1), backendapi.InferRequest{}, "Unable to parse 'sequence_id': attempt to access JSON non-string as string"},
		{"sequence id bool", "sequence_id", true, backendapi.InferRequest{}, "Unable to parse 'sequence_id': attempt to access JSON non-string as string"},
		{"start", "sequence_start", true, backendapi.InferRequest{Flags: backendapi.FlagSequenceStart}, ""},
		{"end", "sequence_end", true, backendapi.InferRequest{Flags: backendapi.FlagSequenceEnd}, ""},
		{"start false", "sequence_start", false, backendapi.InferRequest{}, ""},
		{"start not bool", "sequence_start", int64(1), backendapi.InferRequest{}, "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean"},
		{"priority", "priority", int64(3), backendapi.InferRequest{Priority: 3}, ""},
		{"priority negative", "priority", int64(-3), backendapi.InferRequest{}, "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"timeout", "timeout", uint64(1500), backendapi.InferRequest{Timeout: 1500 * time.Microsecond}, ""},
		{"timeout huge", "timeout", uint64(math.MaxUint64), backendapi.InferRequest{Timeout: math.MaxInt64}, ""},
		{"timeout float", "timeout", 1.5, backendapi.InferRequest{}, "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"binary_data_output", "binary_data_output", true, backendapi.InferRequest{}, ""},
		{"binary_data_output not bool", "binary_data_output", "yes", backendapi.InferRequest{}, "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean"},
		{"reserved", "triton_enable_empty_final_response", true, backendapi.InferRequest{}, "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."},
		{"custom string", "mode", "fast", backendapi.InferRequest{Parameters: map[string]any{"mode": "fast"}}, ""},
		{"custom int", "n", int64(-4), backendapi.InferRequest{Parameters: map[string]any{"n": int64(-4)}}, ""},
		{"custom bool", "b", false, backendapi.InferRequest{Parameters: map[string]any{"b": false}}, ""},
		{"custom double", "x", 0.25, backendapi.InferRequest{Parameters: map[string]any{"x": 0.25}}, ""},
		{"custom big uint", "u", uint64(1 << 63), backendapi.InferRequest{Parameters: map[string]any{"u": float64(1 << 63)}}, ""},
		{"custom null", "z", badParam{}, backendapi.InferRequest{}, "parameter 'z' has invalid type. It should be either 'int', 'bool', or 'string'."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req backendapi.InferRequest
			err := applyRequestParameter(&req, tc.key, tc.value)
			if wantError(t, err, tc.err) {
				if want := wantClass(tc.err); backendapi.CodeOf(err) != want {
					t.Fatalf("class = %v, want %v", backendapi.CodeOf(err), want)
				}
				return
			}
			if !reflect.DeepEqual(req, tc.want) {
				t.Fatalf("request = %+v, want %+v", req, tc.want)
			}
		})
	}
}

func TestParseModelVersion(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{"", 0, ""},
		{"1", 1, ""},
		{"0012", 12, ""},
		{"99999999999999999999", 0, "failed to get model version from specified version string '99999999999999999999' (details: stol), version should be an integral value > 0"},
		{"-1", 0, "invalid model version specified '-1' , version should be an integral value > 0"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseModelVersion(tc.in)
			if wantError(t, err, tc.err) {
				return
			}
			if got != tc.want {
				t.Fatalf("parseModelVersion(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestHTTPStatus(t *testing.T) {
	tests := []struct {
		code backendapi.Code
		want int
	}{
		{backendapi.Internal, 500}, {backendapi.NotFound, 404}, {backendapi.Unavailable, 503},
		{backendapi.Unsupported, 501}, {backendapi.Unknown, 400}, {backendapi.InvalidArg, 400},
		{backendapi.AlreadyExists, 400}, {backendapi.Cancelled, 400},
	}
	for _, tc := range tests {
		t.Run(tc.code.String(), func(t *testing.T) {
			if got := httpStatus(tc.code); got != tc.want {
				t.Fatalf("httpStatus(%v) = %d, want %d", tc.code, got, tc.want)
			}
		})
	}
}

// wantError fails t unless err is what a case wants: an error whose text
// is want, or none when want is empty. It reports whether an error was
// wanted (the case is then done).
func wantError(t *testing.T, err error, want string) bool {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
	return true
}

// wantClass is the class Triton gives an error of this text: its JSON
// accessors' errors (a member of the wrong type, missing, or data that does
// not match its shape) are INTERNAL, the rest of a request's checks
// INVALID_ARG.
func wantClass(msg string) backendapi.Code {
	for _, accessor := range []string{"attempt to ", "Shape does not match", "element longer than"} {
		if strings.Contains(msg, accessor) && !strings.HasPrefix(msg, "failed to parse the request JSON") {
			return backendapi.Internal
		}
	}
	return backendapi.InvalidArg
}
