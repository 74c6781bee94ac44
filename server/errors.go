package server

import (
	"net/http"

	"github.com/stubvisor/stubvisor/backendapi"
)

// Texts Triton's clients and tests match on. They are the messages of the
// errors the front end itself builds; errors from the backend carry their
// own texts.
const (
	msgNotFound         = "Not Found"
	msgMethodNotAllowed = "Method Not Allowed"
	msgModelNotReady    = "Model version not ready"
	msgDecoupledHTTP    = "HTTP end point doesn't support models with decoupled transaction policy"
	msgReservedParam    = "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
	msgRepositoryName   = "'repository_name' specification is not supported"
	msgCompression      = "Unsupported compression type"
	msgShapeMismatch    = "Shape does not match true shape of 'data' field"
	msgNotString        = "attempt to access JSON non-string as string"
	msgNotBool          = "attempt to access JSON non-boolean as boolean"
	msgNotUint          = "attempt to access JSON non-unsigned-integer as unsigned-integer"
	msgNotInt           = "attempt to access JSON non-signed-integer as signed-integer"
	msgNotNumber        = "attempt to access JSON non-number as double"
	msgNotArray         = "attempt to access JSON non-array as array"
	msgNotObject        = "attempt to access JSON non-object as object"
)

// httpStatus maps an error class to the HTTP status Triton uses for it
// (http_server.cc HttpCodeFromError).
func httpStatus(c backendapi.Code) int {
	switch c {
	case backendapi.Internal:
		return http.StatusInternalServerError
	case backendapi.NotFound:
		return http.StatusNotFound
	case backendapi.Unavailable:
		return http.StatusServiceUnavailable
	case backendapi.Unsupported:
		return http.StatusNotImplemented
	default: // Unknown, InvalidArg, AlreadyExists, Cancelled
		return http.StatusBadRequest
	}
}

// httpStatusOf is httpStatus of err's class (Internal when err carries none).
func httpStatusOf(err error) int { return httpStatus(backendapi.CodeOf(err)) }

// invalidArg is shorthand for the most common client error.
func invalidArg(format string, args ...any) error {
	return backendapi.Errorf(backendapi.InvalidArg, format, args...)
}

// fieldError is Triton's RETURN_MSG_IF_ERR form: "<context>: <detail>".
// The detail comes from Triton's JSON accessors, whose errors are of class
// INTERNAL, and RETURN_MSG_IF_ERR keeps the class: a member of the wrong
// type or a missing member is answered with 500, as Triton does.
func fieldError(context, detail string) error {
	return backendapi.Errorf(backendapi.Internal, "%s: %s", context, detail)
}

var (
	hdrContentType  = "Content-Type"
	ctJSON          = []string{"application/json"}
	ctOctetStream   = []string{"application/octet-stream"}
	ctHTML          = []string{"text/html; charset=utf-8"}
	acceptEncodings = []string{"gzip, deflate"}
)

// writeError replies {"error": msg} with the status of err's class.
func writeError(w http.ResponseWriter, err error) {
	writeErrorStatus(w, httpStatusOf(err), backendapi.MessageOf(err))
}

// writeErrorStatus replies {"error": msg} with an explicit status.
func writeErrorStatus(w http.ResponseWriter, status int, msg string) {
	b := make([]byte, 0, len(msg)+16)
	b = append(b, `{"error":`...)
	b = appendJSONString(b, msg)
	b = append(b, '}')
	h := w.Header()
	h[hdrContentType] = ctJSON
	h.Del("Content-Encoding")
	h.Del("Inference-Header-Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
