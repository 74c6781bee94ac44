package server

import (
	"context"
	"net/http"
	"sync"

	"github.com/stubvisor/stubvisor/backendapi"
)

// The generate extension (extension_generate.md): POST
// /v2/models/{m}[/versions/{v}]/generate answers one JSON object, and
// .../generate_stream answers Server-Sent Events, one "data: {...}\n\n" per
// response of the model, ending when the model sends its final flag.
//
// Both run the request with Backend.InferStream, on decoupled and ordinary
// models alike. The HTTP status is that of the first response: an error
// that comes later in a stream is an event {"error": "..."} under status
// 200, as in Triton. A request that fails before the model answers gets an
// ordinary JSON error.
//
// Streaming: each response is encoded in the backend's callback and queued
// for the handler's goroutine, which writes and flushes it. The queue holds
// at most genQueueLen events, so a client that reads slowly makes the
// callback wait, and with it the reading of the stub's responses; they
// wait in the stub's ring and arena. Small outputs travel inside ring
// messages, so a full ring makes the model's send wait; larger ones fill
// the arena up to its limit (the stub does not wait for arena space).
// A client that goes away cancels the request's context, which the backend
// passes on to the model (is_cancelled()); events queued after that are
// dropped.

// genQueueLen bounds the events waiting to be written to one stream.
const genQueueLen = 16

const msgGenerateOneResponse = "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses"

var ctEventStream = []string{"text/event-stream; charset=utf-8"}

// genEvent is one encoded response, or an error in its place.
type genEvent struct {
	data []byte // the JSON object
	err  error  // the response's error (data is then {"error": ...})
}

// handleGenerate serves generate (streaming false) and generate_stream.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request, model, versionStr string, streaming bool) {
	version, ok := admitVersion(w, r, http.MethodPost, versionStr)
	if !ok {
		return
	}
	md, err := s.backend.ModelMetadata(r.Context(), model, version)
	if err != nil {
		writeError(w, err)
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		writeError(w, invalidArg("Unsupported content-encoding, only 'identity' is supported."))
		return
	}
	tr := s.tracer.StartHTTP(model, version, r)
	defer tr.End()
	body, err := readLimited(nil, r.Body, r.ContentLength, s.maxInput, false)
	tr.Stamp("HTTP_RECV_END")
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := parseGenerateRequest(body, md, s.maxInput)
	if err != nil {
		writeError(w, err)
		return
	}
	req.ModelName = model
	req.ModelVersion = version
	tr.Submit(req)
	if streaming {
		s.generateStream(w, r, req)
	} else {
		s.generateOne(w, r, req)
	}
}

// encodeGenEvent encodes one response for the stream (or the single answer).
func encodeGenEvent(resp *backendapi.InferResponse, err error, req *backendapi.InferRequest) genEvent {
	if err == nil {
		var data []byte
		data, err = appendGenerateResponse(make([]byte, 0, 256), resp, req.ModelName, req.ID)
		if err == nil {
			return genEvent{data: data}
		}
	}
	return genEvent{data: appendErrorJSON(nil, backendapi.MessageOf(err)), err: err}
}

func appendErrorJSON(dst []byte, msg string) []byte {
	dst = append(dst, `{"error":`...)
	dst = appendJSONString(dst, msg)
	return append(dst, '}')
}

// isFlagOnly reports whether a callback carries only the final flag: the
// stub protocol does not tell a response without outputs from a bare
// send(flags=FINAL), and Triton writes nothing for the latter.
func isFlagOnly(resp *backendapi.InferResponse, err error, final bool) bool {
	return err == nil && (resp == nil || final && len(resp.Outputs) == 0 && len(resp.Parameters) == 0)
}

// generateOne runs the request and answers its single response.
func (s *Server) generateOne(w http.ResponseWriter, r *http.Request, req *backendapi.InferRequest) {
	var events []genEvent
	err := s.backend.InferStream(r.Context(), req, func(resp *backendapi.InferResponse, err error, final bool) {
		if !isFlagOnly(resp, err, final) {
			events = append(events, encodeGenEvent(resp, err, req))
		}
	})
	switch {
	case err != nil && len(events) == 0:
		writeError(w, err)
	case len(events) != 1:
		writeError(w, backendapi.Errorf(backendapi.Internal, "%s", msgGenerateOneResponse))
	case events[0].err != nil:
		writeError(w, events[0].err)
	default:
		writeRawJSON(w, events[0].data)
	}
}

// generateStream runs the request and writes its responses as events.
func (s *Server) generateStream(w http.ResponseWriter, r *http.Request, req *backendapi.InferRequest) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	queue := make(chan genEvent, genQueueLen)
	var reqErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(queue)
		reqErr = s.backend.InferStream(ctx, req, func(resp *backendapi.InferResponse, err error, final bool) {
			if isFlagOnly(resp, err, final) {
				return
			}
			ev := encodeGenEvent(resp, err, req)
			select {
			case queue <- ev:
			case <-ctx.Done():
			}
		})
	}()
	started, broken := false, false
	flusher, _ := w.(http.Flusher)
	for ev := range queue {
		if broken {
			continue // the client is gone: drain until the request ends
		}
		if !started {
			started = true
			status := http.StatusOK
			if ev.err != nil {
				status = httpStatusOf(ev.err)
			}
			w.Header()[hdrContentType] = ctEventStream
			w.WriteHeader(status)
		}
		if !writeSSE(w, ev.data) {
			broken = true
			cancel()
			continue
		}
		if len(queue) == 0 && flusher != nil {
			flusher.Flush()
		}
	}
	wg.Wait()
	switch {
	case started:
	case reqErr != nil:
		writeError(w, reqErr)
	default:
		// The model answered with the final flag alone: an empty stream.
		w.Header()[hdrContentType] = ctEventStream
		w.WriteHeader(http.StatusOK)
	}
}

// writeSSE writes one "data: ...\n\n" event; false means the client is gone.
func writeSSE(w http.ResponseWriter, data []byte) bool {
	if _, err := w.Write(sseData); err != nil {
		return false
	}
	if _, err := w.Write(data); err != nil {
		return false
	}
	_, err := w.Write(sseEnd)
	return err == nil
}

var (
	sseData = []byte("data: ")
	sseEnd  = []byte("\n\n")
)
