package server

import (
	_ "embed"
	"net/http"

	"github.com/stubvisor/stubvisor/backendapi"
)

// stubJSON is a stub's status as /v2/stubs shows it: backendapi's JSON
// fields plus the two durations, in milliseconds and seconds.
type stubJSON struct {
	backendapi.StubStatus
	HeartbeatAgeMS float64 `json:"heartbeat_age_ms"`
	UptimeS        float64 `json:"uptime_s"`
}

type modelStubsJSON struct {
	Model   string                `json:"model"`
	Version string                `json:"version"`
	State   backendapi.ModelState `json:"state"`
	Reason  string                `json:"reason,omitempty"`
	Stubs   []stubJSON            `json:"stubs"`
	// Steps are an ensemble's steps.
	Steps []backendapi.EnsembleStep `json:"steps,omitempty"`
	// History is the last minutes, with ?history=1.
	History []backendapi.Sample `json:"history,omitempty"`
}

// stubsJSON is the JSON form of the supervisor's view of its stubs; the
// history of each version only when asked for (the status page's plots).
func stubsJSON(models []backendapi.ModelStubs, history bool) any {
	out := make([]modelStubsJSON, 0, len(models))
	for _, m := range models {
		ms := modelStubsJSON{Model: m.Model, Version: m.Version, State: m.State, Reason: m.Reason, Stubs: make([]stubJSON, len(m.Stubs)), Steps: m.Steps}
		if history {
			ms.History = m.History
		}
		for i, st := range m.Stubs {
			ms.Stubs[i] = stubJSON{
				StubStatus:     st,
				HeartbeatAgeMS: float64(st.HeartbeatAge.Microseconds()) / 1e3,
				UptimeS:        st.Uptime.Seconds(),
			}
		}
		out = append(out, ms)
	}
	return out
}

// handleStubs serves GET /v2/stubs and /v2/models/{m}[/versions/{v}]/stubs
// (?history=1 adds each version's last minutes).
func (s *Server) handleStubs(w http.ResponseWriter, r *http.Request, model, version string) {
	if _, ok := admitVersion(w, r, http.MethodGet, version); !ok {
		return
	}
	models, err := s.backend.Stubs(r.Context(), model)
	if err != nil {
		writeError(w, err)
		return
	}
	if version != "" {
		kept := models[:0:0]
		for _, m := range models {
			if m.Version == version {
				kept = append(kept, m)
			}
		}
		models = kept
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, stubsJSON(models, r.URL.Query().Get("history") == "1"))
}

//go:embed status.html
var statusPage []byte

// handleStatusPage serves the self-contained status page at /.
func (s *Server) handleStatusPage(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	h := w.Header()
	h[hdrContentType] = ctHTML
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(statusPage)
	}
}
