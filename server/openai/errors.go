package openai

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/stubvisor/stubvisor/backendapi"
)

// apiError is an error with the HTTP status and OpenAI error type a client
// sees. Errors from the backend are mapped in statusOf.
type apiError struct {
	status int
	code   string // OpenAI's "code": "model_not_found", or ""
	param  string // the request field at fault, or ""
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// badRequest is a 400 for a request field.
func badRequest(param, format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, args...)}
}

// unknownModel is the 404 of a model that is not served here, with Triton's
// text ("Unknown model: <name>").
func unknownModel(name string) error {
	return &apiError{status: http.StatusNotFound, code: "model_not_found", param: "model", msg: "Unknown model: " + name}
}

// errQueueFull is how the backend says a model's queue is full; it is
// answered with 429, so that clients back off and retry.
var errQueueFull = backendapi.ErrQueueFull

// statusOf maps an error to its HTTP status: an apiError's own, 429 for a
// full queue, and otherwise by the backendapi class, as the KServe front
// end does, except that an unknown model is 404 and an overloaded server
// 429 as OpenAI answers them.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status
	}
	if errors.Is(err, errQueueFull) {
		return http.StatusTooManyRequests
	}
	switch backendapi.CodeOf(err) {
	case backendapi.InvalidArg, backendapi.Unknown, backendapi.AlreadyExists:
		return http.StatusBadRequest
	case backendapi.NotFound:
		return http.StatusNotFound
	case backendapi.Unavailable:
		return http.StatusServiceUnavailable
	case backendapi.Unsupported:
		return http.StatusNotImplemented
	case backendapi.Cancelled:
		return 499 // the client went away; nobody reads this
	}
	return http.StatusInternalServerError
}

// errorType is OpenAI's "type" for a status.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status < 500:
		return "invalid_request_error"
	}
	return "server_error"
}

// errorObject is OpenAI's error body: {"error": {"message", "type",
// "param", "code"}}.
type errorObject struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// newErrorObject builds the error body of err.
func newErrorObject(err error) (int, errorObject) {
	status := statusOf(err)
	d := errorDetail{Message: backendapi.MessageOf(err), Type: errorType(status)}
	var ae *apiError
	if errors.As(err, &ae) {
		d.Message = ae.msg
		if ae.param != "" {
			d.Param = &ae.param
		}
		if ae.code != "" {
			d.Code = &ae.code
		}
	}
	return status, errorObject{Error: d}
}

// writeError answers err as OpenAI's error object.
func writeError(w http.ResponseWriter, err error) {
	status, obj := newErrorObject(err)
	writeJSON(w, status, obj)
}
