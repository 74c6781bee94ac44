package backendapi

import (
	"errors"
	"fmt"
)

// Code classifies an error the way Triton's TRITONSERVER_Error_Code does.
// The numeric values are Triton's, so a code travels unchanged from a
// model's pb_utils.TritonError through the stub protocol to the front end,
// which alone maps it to an HTTP status or gRPC code.
//
// A Code is itself an error, so it serves as the sentinel for its class:
// errors.Is(err, backendapi.NotFound) is true for every *Error with that code.
type Code uint8

// The error classes of the Triton server API.
const (
	Unknown       Code = 0
	Internal      Code = 1
	NotFound      Code = 2
	InvalidArg    Code = 3
	Unavailable   Code = 4
	Unsupported   Code = 5
	AlreadyExists Code = 6
	Cancelled     Code = 7
)

var codeNames = [...]string{"UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED"}

// String returns Triton's name for the code ("NOT_FOUND").
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "UNKNOWN"
}

// Error makes a Code usable as a sentinel error.
func (c Code) Error() string { return c.String() }

// Error is an error with a Triton class and the exact message a client
// sees. Front ends print Msg verbatim (Triton's clients and tests match on
// these texts), so Msg carries no Go-style "op:" prefixes.
type Error struct {
	Code Code
	Msg  string
	// cause, set by Wrapf, is the error Msg reports in other words; it
	// stays in the chain, so errors.Is still finds its sentinels.
	cause error
}

// Errorf returns an *Error of class code.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrapf returns an *Error of class code with its own message that keeps
// cause in its chain (errors.Is and errors.As see through it).
func Wrapf(cause error, code Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), cause: cause}
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the error Wrapf was given, or nil.
func (e *Error) Unwrap() error { return e.cause }

// Is matches the Code sentinels.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// CodeOf returns the class of err: the Code of the first *Error or Code in
// its chain, or Internal when there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var c Code
	if errors.As(err, &c) {
		return c
	}
	return Internal
}

// MessageOf returns the client-facing text of err: the Msg of the first
// *Error in its chain (without the wrapping context added for logs), or
// err.Error() when there is none.
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Msg
	}
	return err.Error()
}

// ErrDecoupled is returned by Backend.Infer for a model that uses the
// decoupled transaction policy: such a model may send any number of
// responses, so it is served only by streaming endpoints. Front ends
// replace the text with their own (Triton's HTTP and gRPC texts differ).
var ErrDecoupled error = &Error{Code: Unsupported, Msg: "model uses the decoupled transaction policy; use a streaming endpoint"}

// ErrQueueFull is returned when a model's queue holds max_queue_size
// requests already (Triton's "Exceeds maximum queue size"). Front ends that
// tell overload apart (the OpenAI API answers 429) match it with errors.Is.
var ErrQueueFull error = &Error{Code: Unavailable, Msg: "Exceeds maximum queue size"}
