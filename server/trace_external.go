package server

import (
	"net/http"

	"github.com/stubvisor/stubvisor/backendapi"
)

// TraceHTTP starts the trace (--trace-config) of one request that another
// HTTP front end on this server builds from r, such as the OpenAI API's:
// submit attaches the trace to the request just before the backend gets
// it, end completes the trace once the request is over. Both do nothing
// when the request is not traced.
func (s *Server) TraceHTTP(r *http.Request, model string) (submit func(*backendapi.InferRequest), end func()) {
	rt := s.tracer.StartHTTP(model, 0, r)
	if rt == nil {
		return func(*backendapi.InferRequest) {}, func() {}
	}
	return rt.Submit, rt.End
}
