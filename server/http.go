package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/stubvisor/stubvisor/backendapi"
)

// route dispatches a request by Triton's URL grammar (http_server.cc):
//
//	/v2(?:/health/(live|ready))?
//	/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?
//	/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))
//	/v2/systemsharedmemory(?:/region/([^/]+))?/(status|register|unregister)
//	/v2/cudasharedmemory(?:/region/([^/]+))?/(status|register|unregister)
//	/v2/trace/setting   /v2/models/stats   /v2/logging
//
// plus stubvisor's /v2/stubs, /v2/models/{m}/stubs and the status page at
// /. Path segments are matched in their escaped form and then
// percent-decoded, so a model name may contain an encoded '/'. Anything else
// is 404 {"error":"Not Found"}; a known path with the wrong method is 405.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	defer guardBody(w, r, s.bodyTTL).end()
	p := r.URL.EscapedPath()
	if g, ok := fixedRoutes[p]; ok {
		if !s.admitHTTP(w, r, g) {
			return
		}
		switch p {
		case "/":
			s.handleStatusPage(w, r)
		case "/v2":
			s.handleServerMetadata(w, r)
		case "/v2/health/live", "/v2/health/ready":
			s.handleHealth(w, r, p == "/v2/health/live")
		case "/v2/models/stats":
			s.handleStats(w, r, "", "")
		case "/v2/logging":
			s.handleLogging(w, r)
		case "/v2/trace/setting":
			s.handleTrace(w, r, "")
		case "/v2/stubs":
			s.handleStubs(w, r, "", "")
		}
		return
	}
	if rest, ok := strings.CutPrefix(p, "/v2/models/"); ok && s.routeModel(w, r, rest) {
		return
	}
	if rest, ok := strings.CutPrefix(p, "/v2/repository/"); ok && s.routeRepository(w, r, rest) {
		return
	}
	if rest, ok := strings.CutPrefix(p, "/v2/systemsharedmemory/"); ok && s.routeSharedMemory(w, r, rest, false) {
		return
	}
	if rest, ok := strings.CutPrefix(p, "/v2/cudasharedmemory/"); ok && s.routeSharedMemory(w, r, rest, true) {
		return
	}
	writeErrorStatus(w, http.StatusNotFound, msgNotFound)
}

// fixedRoutes are the paths without parameters and the restricted API
// group (--http-restricted-api) each belongs to. The status page and its
// data (/v2/stubs) are in statistics: they show each instance's load,
// restarts and errors, what the statistics extension shows per model.
var fixedRoutes = map[string]APIGroup{
	"/":                 GroupStatistics,
	"/v2":               GroupMetadata,
	"/v2/health/live":   GroupHealth,
	"/v2/health/ready":  GroupHealth,
	"/v2/models/stats":  GroupStatistics,
	"/v2/logging":       GroupLogging,
	"/v2/trace/setting": GroupTrace,
	"/v2/stubs":         GroupStatistics,
}

// modelRouteGroups are the restricted API groups of the kinds of
// /v2/models/{m}[/versions/{v}][/{kind}].
var modelRouteGroups = map[string]APIGroup{
	"":                GroupMetadata,
	"infer":           GroupInference,
	"generate":        GroupInference,
	"generate_stream": GroupInference,
	"ready":           GroupHealth,
	"config":          GroupModelConfig,
	"stats":           GroupStatistics,
	"stubs":           GroupStatistics,
	"trace/setting":   GroupTrace,
}

// unescapeSegment percent-decodes one path segment.
func unescapeSegment(w http.ResponseWriter, seg string) (string, bool) {
	if strings.IndexByte(seg, '%') < 0 {
		return seg, true
	}
	v, err := url.PathUnescape(seg)
	if err != nil {
		writeError(w, invalidArg("invalid percent-encoding in path segment '%s'", seg))
		return "", false
	}
	return v, true
}

// routeModel handles /v2/models/{m}[/versions/{v}][/{kind}].
func (s *Server) routeModel(w http.ResponseWriter, r *http.Request, rest string) bool {
	name, kind, _ := strings.Cut(rest, "/")
	if name == "" {
		return false
	}
	version := ""
	if t, ok := strings.CutPrefix(kind, "versions/"); ok {
		v, after, _ := strings.Cut(t, "/")
		if v == "" || strings.Trim(v, "0123456789") != "" {
			return false
		}
		version = v
		kind = after
	}
	g, known := modelRouteGroups[kind]
	if !known || kind == "trace/setting" && version != "" {
		return false
	}
	if !s.admitHTTP(w, r, g) {
		return true
	}
	model, ok := unescapeSegment(w, name)
	if !ok {
		return true
	}
	switch kind {
	case "infer":
		s.handleInfer(w, r, model, version)
	case "":
		s.handleModelMetadata(w, r, model, version)
	case "ready":
		s.handleModelReady(w, r, model, version)
	case "config":
		s.handleModelConfig(w, r, model, version)
	case "stats":
		s.handleStats(w, r, model, version)
	case "stubs":
		s.handleStubs(w, r, model, version)
	case "trace/setting":
		s.handleTrace(w, r, model)
	case "generate", "generate_stream":
		s.handleGenerate(w, r, model, version, kind == "generate_stream")
	}
	return true
}

// routeRepository handles /v2/repository[/{repo}]/index and
// /v2/repository[/{repo}]/models/{m}/(load|unload).
func (s *Server) routeRepository(w http.ResponseWriter, r *http.Request, rest string) bool {
	segs := strings.Split(rest, "/")
	for _, sg := range segs {
		if sg == "" {
			return false
		}
	}
	repo := ""
	switch {
	case len(segs) == 1 && segs[0] == "index":
	case len(segs) == 2 && segs[1] == "index":
		repo = segs[0]
	case len(segs) == 3 && segs[0] == "models":
	case len(segs) == 4 && segs[1] == "models":
		repo, segs = segs[0], segs[1:]
	default:
		return false
	}
	index := segs[len(segs)-1] == "index"
	if !index && segs[2] != "load" && segs[2] != "unload" {
		return false
	}
	if !s.admitHTTP(w, r, GroupModelRepository) {
		return true
	}
	if index {
		s.handleRepositoryIndex(w, r, repo)
		return true
	}
	action := segs[2]
	model, ok := unescapeSegment(w, segs[1])
	if !ok {
		return true
	}
	s.handleRepositoryControl(w, r, repo, model, action)
	return true
}

// routeSharedMemory handles /v2/(system|cuda)sharedmemory[/region/{r}]/{action}.
func (s *Server) routeSharedMemory(w http.ResponseWriter, r *http.Request, rest string, cuda bool) bool {
	region := ""
	action := rest
	if t, ok := strings.CutPrefix(rest, "region/"); ok {
		var found bool
		region, action, found = strings.Cut(t, "/")
		if !found || region == "" {
			return false
		}
	}
	switch action {
	case "status", "register", "unregister":
	default:
		return false
	}
	if !s.admitHTTP(w, r, GroupSharedMemory) {
		return true
	}
	region, ok := unescapeSegment(w, region)
	if !ok {
		return true
	}
	if cuda {
		s.handleCUDASharedMemory(w, r, region, action)
	} else {
		s.handleSystemSharedMemory(w, r, region, action)
	}
	return true
}

// allow replies 405 unless the request uses one of the methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	writeErrorStatus(w, http.StatusMethodNotAllowed, msgMethodNotAllowed)
	return false
}

// writeJSON replies 200 with v marshalled by encoding/json (for the
// endpoints off the hot path).
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, backendapi.Errorf(backendapi.Internal, "failed to encode the response: %v", err))
		return
	}
	writeRawJSON(w, b)
}

func writeRawJSON(w http.ResponseWriter, b []byte) {
	w.Header()[hdrContentType] = ctJSON
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func (s *Server) handleServerMetadata(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	writeRawJSON(w, s.metadata)
}

// handleHealth answers live/ready with an empty body: 200 or 400.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request, live bool) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	ok := s.backend.Ready()
	if live {
		ok = s.backend.Live()
	}
	if ok {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusBadRequest)
}
