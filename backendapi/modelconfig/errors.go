package modelconfig

import (
	"errors"
	"fmt"

	"github.com/stubvisor/stubvisor/backendapi"
)

var (
	// ErrParse is returned when a config.pbtxt or config JSON cannot be read
	// into a ModelConfig (syntax, unknown field, wrong value type).
	ErrParse = errors.New("modelconfig: cannot parse model configuration")
	// ErrInvalid is returned by Validate (and Load) when a configuration is
	// well-formed but not acceptable.
	ErrInvalid = errors.New("modelconfig: invalid model configuration")
	// ErrNoVersions is returned by Versions when the version policy selects
	// no version directory.
	ErrNoVersions = errors.New("modelconfig: no model version available")
	// ErrDuplicateModel marks a ModelDir whose name appears in more than one
	// repository.
	ErrDuplicateModel = errors.New("modelconfig: model name not unique across repositories")
)

// configError is a client-facing configuration error: errors.Is matches both
// its sentinel and its backendapi.Code, and backendapi.MessageOf returns the
// text without any Go-style prefix.
type configError struct {
	kind error
	api  *backendapi.Error
}

func (e *configError) Error() string   { return e.api.Msg }
func (e *configError) Unwrap() []error { return []error{e.kind, e.api} }

func newError(kind error, code backendapi.Code, format string, args ...any) error {
	return &configError{kind: kind, api: &backendapi.Error{Code: code, Msg: fmt.Sprintf(format, args...)}}
}

func invalidf(format string, args ...any) error {
	return newError(ErrInvalid, backendapi.InvalidArg, format, args...)
}
