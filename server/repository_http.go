package server

import (
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/stubvisor/stubvisor/backendapi"
)

// modelIndexJSON is one row of the repository index; a model that was never
// loaded has only a name.
type modelIndexJSON struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// handleRepositoryIndex serves POST /v2/repository/index with an optional
// {"ready": bool} body. Like Triton it ignores a repository name.
func (s *Server) handleRepositoryIndex(w http.ResponseWriter, r *http.Request, _ string) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	body, err := readControlBody(r, s.maxInput)
	if err != nil {
		writeError(w, err)
		return
	}
	obj, err := parseJSONObject(body, true)
	if err != nil {
		writeError(w, err)
		return
	}
	ready := false
	if raw, ok := obj["ready"]; ok {
		if ready, err = rawBool(raw); err != nil {
			writeError(w, invalidArg("Invalid value for 'ready': expected a boolean"))
			return
		}
	}
	index, err := s.backend.RepositoryIndex(r.Context(), ready)
	if err != nil {
		writeError(w, err)
		return
	}
	rows := make([]modelIndexJSON, len(index))
	for i, e := range index {
		rows[i] = modelIndexJSON{Name: e.Name, Version: e.Version, State: string(e.State), Reason: e.Reason}
	}
	writeJSON(w, rows)
}

// handleRepositoryControl serves POST .../models/{m}/load and .../unload.
func (s *Server) handleRepositoryControl(w http.ResponseWriter, r *http.Request, repo, model, action string) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	w.Header()[hdrContentType] = ctJSON
	if repo != "" {
		writeError(w, backendapi.Errorf(backendapi.Unsupported, "%s", msgRepositoryName))
		return
	}
	body, err := readControlBody(r, s.maxInput)
	if err != nil {
		writeError(w, err)
		return
	}
	if action == "load" {
		var opts backendapi.LoadOptions
		if opts, err = parseLoadParameters(body); err == nil {
			err = s.backend.LoadModel(r.Context(), model, opts)
		}
		if err != nil {
			writeError(w, err)
			return
		}
	} else {
		dependents, err := parseUnloadParameters(body)
		if err == nil {
			err = s.backend.UnloadModel(r.Context(), model, dependents)
		}
		if err != nil {
			writeError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// requestParameters returns the "parameters" object of a control body.
func requestParameters(body []byte) (jsonObject, error) {
	obj, err := parseJSONObject(body, true)
	if err != nil {
		return nil, err
	}
	raw, ok := obj["parameters"]
	if !ok {
		return jsonObject{}, nil
	}
	params, err := rawObject(raw)
	if err != nil {
		return nil, invalidArg("attempt to get members for non-object")
	}
	return params, nil
}

// parseLoadParameters reads a load request: "config" (model config JSON)
// and "file:<version>/<path>" (base64 file contents). Other keys are
// ignored.
func parseLoadParameters(body []byte) (backendapi.LoadOptions, error) {
	var opts backendapi.LoadOptions
	params, err := requestParameters(body)
	if err != nil {
		return opts, err
	}
	for key, raw := range params {
		if key != "config" && !strings.HasPrefix(key, "file:") {
			continue
		}
		v, err := rawString(raw)
		if err != nil {
			return opts, err
		}
		if key == "config" {
			opts.ConfigJSON = v
			continue
		}
		data, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			if data, err = base64.RawStdEncoding.DecodeString(v); err != nil {
				return opts, invalidArg("failed to decode the base64 content of '%s': %v", key, err)
			}
		}
		if opts.Files == nil {
			opts.Files = make(map[string][]byte)
		}
		opts.Files[key] = data
	}
	return opts, nil
}

// parseUnloadParameters reads an unload request's "unload_dependents".
func parseUnloadParameters(body []byte) (bool, error) {
	params, err := requestParameters(body)
	if err != nil {
		return false, err
	}
	raw, ok := params["unload_dependents"]
	if !ok {
		return false, nil
	}
	v, err := rawBool(raw)
	if err != nil {
		return false, fieldError("Unable to parse 'unload_dependents'", msgNotBool)
	}
	return v, nil
}
