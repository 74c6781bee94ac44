package server

import (
	"encoding/json"
	"net/http"

	"github.com/stubvisor/stubvisor/backendapi"
)

// This file reads the small JSON bodies of the control endpoints
// (repository, shared memory, logging). They are validated by the same
// scanner as infer requests, so malformed JSON gets the same messages, and
// then decoded member by member with Triton's type-error texts.

// readControlBody reads a control request body. A model load may carry
// model files, so the limit is the infer limit.
func readControlBody(r *http.Request, limit int64) ([]byte, error) {
	return readLimited(nil, r.Body, r.ContentLength, limit, false)
}

// jsonObject is a parsed JSON object whose members are decoded on demand.
type jsonObject map[string]json.RawMessage

// parseJSONObject parses body as a JSON object. An empty body is an error
// (Triton parses it as an empty document) unless allowEmpty.
func parseJSONObject(body []byte, allowEmpty bool) (jsonObject, error) {
	if allowEmpty && len(body) == 0 {
		return jsonObject{}, nil
	}
	var sc jsonScanner
	sc.reset(body)
	if err := sc.begin(); err != nil {
		return nil, err
	}
	if sc.kind() != kindObject {
		if err := sc.skipValue(); err != nil {
			return nil, err
		}
		if err := sc.end(); err != nil {
			return nil, err
		}
		return nil, invalidArg("the request body must be a JSON object")
	}
	// The members are split by the scanner, not encoding/json, so a member
	// nested deeper than encoding/json allows is still found and refused
	// by its decoder with Triton's type error.
	obj := jsonObject{}
	err := sc.members(func(key []byte, at int) error {
		err := sc.skipValue()
		obj[string(key)] = json.RawMessage(body[at:sc.pos])
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := sc.end(); err != nil {
		return nil, err
	}
	return obj, nil
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// member decoders: each returns Triton's accessor error for a wrong type.

func rawString(raw json.RawMessage) (string, error) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", backendapi.Errorf(backendapi.InvalidArg, "%s", msgNotString)
	}
	return s, nil
}

func rawBool(raw json.RawMessage) (bool, error) {
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, backendapi.Errorf(backendapi.InvalidArg, "%s", msgNotBool)
}

func rawUint(raw json.RawMessage) (uint64, error) {
	sc := jsonScanner{buf: raw}
	if sc.kind() == kindNumber {
		if n, err := sc.readNumber(); err == nil && sc.pos == len(raw) {
			if v, ok := n.uint64(); ok {
				return v, nil
			}
		}
	}
	return 0, backendapi.Errorf(backendapi.InvalidArg, "%s", msgNotUint)
}

func rawObject(raw json.RawMessage) (jsonObject, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "%s", msgNotObject)
	}
	obj := jsonObject{}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, backendapi.Errorf(backendapi.InvalidArg, "%s", msgNotObject)
	}
	return obj, nil
}
