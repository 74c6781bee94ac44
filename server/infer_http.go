package server

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/server/httpserve"
)

const hdrInferHeaderLength = "Inference-Header-Content-Length"

// handleInfer serves POST /v2/models/{m}[/versions/{v}]/infer.
//
// The model's config is read first (Triton checks the transaction policy
// before touching the body), so Backend.ModelConfig is on the hot path and
// should return its stored config without copying it. The request handed
// to Backend.Infer aliases pooled buffers (the body, decoded tensors): the
// backend must not keep it, or any slice in it, after Infer returns.
func (s *Server) handleInfer(w http.ResponseWriter, r *http.Request, model, versionStr string) {
	version, ok := admitVersion(w, r, http.MethodPost, versionStr)
	if !ok {
		return
	}
	ctx := r.Context()
	cfg, err := s.backend.ModelConfig(ctx, model, version)
	if err != nil {
		s.inferFailed(w, model, err)
		return
	}
	if cfg.GetModelTransactionPolicy().GetDecoupled() {
		s.inferFailed(w, model, backendapi.Errorf(backendapi.Unsupported, "%s", msgDecoupledHTTP))
		return
	}
	held := max(r.ContentLength, 0)
	if err := s.budget.acquire(held); err != nil {
		drainBody(r)
		writeErrorStatus(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	defer func() { s.budget.release(held) }()
	tr := s.tracer.StartHTTP(model, version, r)
	defer tr.End()
	c := getCall()
	defer putCall(c)
	hdr, bin, hdrGiven, ok := s.readInferBody(w, r, c, model, version, &held)
	tr.Stamp("HTTP_RECV_END")
	if !ok {
		return
	}
	if hdrGiven && len(hdr) == 0 {
		md, err := s.backend.ModelMetadata(ctx, model, version)
		if err == nil {
			err = c.buildRawRequest(model, md, cfg.GetMaxBatchSize(), bin)
		}
		if err != nil {
			s.inferFailed(w, model, err)
			return
		}
	} else if err := c.parseInferHeader(model, hdr, bin, hdrGiven); err != nil {
		s.inferFailed(w, model, err)
		return
	}
	c.req.InputBuffer = c.staged
	c.req.ModelName = model
	c.req.ModelVersion = version
	if s.forward != nil {
		if err := forwardHTTPHeaders(s.forward, &c.req, r.Header); err != nil {
			s.inferFailed(w, model, err)
			return
		}
	}
	tr.Submit(&c.req)
	resp, err := s.backend.Infer(ctx, &c.req)
	if err != nil {
		s.inferFailed(w, model, err)
		return
	}
	defer resp.Release()
	tr.Response(resp)
	tr.Stamp("HTTP_SEND_START")
	if err := s.writeInferResponse(w, r, c, resp); err != nil {
		s.inferFailed(w, model, err)
	}
	tr.Stamp("HTTP_SEND_END")
}

// readInferBody reads an infer request's body, straight into the
// backend's memory where it can (readDirect), and splits it into the JSON
// header and the binary part. held is what the body holds of the memory
// budget, raised for a chunked or compressed body. When it fails it has
// answered the client, and ok is false.
func (s *Server) readInferBody(w http.ResponseWriter, r *http.Request, c *inferCall, model string, version int64, held *int64) (hdr, bin []byte, hdrGiven, ok bool) {
	hdr, bin, direct, err := c.readDirect(r.Context(), r, s.backend, model, version, s.maxInput)
	if direct {
		if err != nil {
			s.inferFailed(w, model, err)
			return nil, nil, false, false
		}
		return hdr, bin, true, true
	}
	body, err := c.readBody(w, r, s.maxInput)
	if err != nil {
		if errors.Is(err, errBodyTooLarge) {
			drainBody(r)
		}
		s.inferFailed(w, model, err)
		return nil, nil, false, false
	}
	if n := c.bodyBytes(body) - *held; n > 0 { // chunked or compressed
		if err := s.budget.acquire(n); err != nil {
			writeErrorStatus(w, http.StatusServiceUnavailable, err.Error())
			return nil, nil, false, false
		}
		*held += n
	}
	hdrLen, hdrGiven, err := inferHeaderLength(r, len(body))
	if err != nil {
		s.inferFailed(w, model, err)
		return nil, nil, false, false
	}
	return body[:hdrLen], body[hdrLen:], hdrGiven, true
}

func (s *Server) inferFailed(w http.ResponseWriter, model string, err error) {
	if s.log.IsDebug() {
		s.log.Debug("infer failed", "model", model, "error", err)
	}
	writeError(w, err)
}

// tooLarge is the error for a body over the configured limit, in Triton's
// words for a JSON body and for a raw binary input. size is -1 when the body
// was cut off at the limit without a length announced.
func tooLarge(size, limit int64, raw bool) error {
	n := strconv.FormatInt(size, 10)
	if size < 0 {
		n = "more than " + strconv.FormatInt(limit, 10)
	}
	if raw {
		return backendapi.Wrapf(errBodyTooLarge, backendapi.InvalidArg, "Raw input has a byte_size (%s bytes) that exceeds the maximum allowed value of %d bytes. Use --http-max-input-size to increase the limit.", n, limit)
	}
	return backendapi.Wrapf(errBodyTooLarge, backendapi.InvalidArg, "request JSON size of %s bytes exceeds the maximum allowed input size of %d bytes. Use --http-max-input-size to increase the limit.", n, limit)
}

// errBodyTooLarge is the cause of tooLarge's errors.
var errBodyTooLarge = errors.New("request body over --http-max-input-size")

// maxDrain bounds what drainBody reads of a refused body.
const maxDrain = 4 << 30

// drainBody reads and drops what is left of a body the server refuses
// before reading it all, so that the client, still sending, gets the error
// response rather than a reset connection (Triton reads the whole body
// before it answers). The body read timeout still applies, and a body over
// maxDrain is cut off.
func drainBody(r *http.Request) {
	_, _ = io.CopyN(io.Discard, r.Body, maxDrain)
}

// readBody reads the request body into the call's pooled buffer,
// decompressing gzip or deflate (zlib) bodies, and refuses bodies over limit
// (before and after decompression).
func (c *inferCall) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	enc := r.Header.Get("Content-Encoding")
	switch enc {
	case "", "identity", "gzip", "deflate":
	default:
		w.Header()["Accept-Encoding"] = acceptEncodings
		return nil, invalidArg("%s", msgCompression)
	}
	raw := isRawBody(r)
	var err error
	c.body, err = readLimited(c.body[:0], r.Body, r.ContentLength, limit, raw)
	if err != nil || enc == "" || enc == "identity" {
		return c.body, err
	}
	zr, err := getInflater(enc, c.body)
	if err == nil {
		c.inflated, err = readLimited(c.inflated[:0], zr, -1, limit, raw)
		if errors.Is(err, errBodyTooLarge) {
			err = invalidArg("Decompressed data size exceeds the maximum allowed value of %d bytes. Use --http-max-input-size to increase the limit.", limit)
		}
	}
	zr.release()
	if err != nil {
		var be *backendapi.Error
		if errors.As(err, &be) {
			return nil, err
		}
		return nil, invalidArg("failed to decompress the request body (%s): %v", enc, err)
	}
	return c.inflated, nil
}

// bodyBytes is what the read body holds: the bytes received and, when it
// came compressed, the inflated ones.
func (c *inferCall) bodyBytes(body []byte) int64 {
	n := int64(len(c.body))
	if len(body) > 0 && len(c.body) > 0 && &body[0] != &c.body[0] {
		n += int64(len(body))
	}
	return n
}

// readLimited appends all of rd to dst, failing when it exceeds limit.
// size is the announced length, or -1.
func readLimited(dst []byte, rd io.Reader, size, limit int64, raw bool) ([]byte, error) {
	if size > limit {
		return dst, tooLarge(size, limit, raw)
	}
	if size >= 0 {
		dst = slices.Grow(dst, int(size))[:size]
		if _, err := io.ReadFull(rd, dst); err != nil {
			return dst[:0], invalidArg("failed to read the request body: %v", err)
		}
		return dst, nil
	}
	for {
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, max(512, len(dst)))
		}
		n, err := rd.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if int64(len(dst)) > limit {
			return dst[:0], tooLarge(-1, limit, raw)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst[:0], invalidArg("failed to read the request body: %v", err)
		}
	}
}

// isRawBody reports whether the body is one raw binary input
// (Inference-Header-Content-Length: 0), for the wording of size errors.
func isRawBody(r *http.Request) bool {
	v := r.Header[hdrInferHeaderLength]
	return len(v) > 0 && strings.TrimSpace(v[0]) == "0"
}

// inferHeaderLength reads Inference-Header-Content-Length: the length of the
// JSON header at the start of the body. Without the header the whole body is
// JSON; with it set to 0 the body is one raw binary input.
func inferHeaderLength(r *http.Request, bodyLen int) (n int, given bool, err error) {
	v := r.Header[hdrInferHeaderLength]
	if len(v) == 0 {
		return bodyLen, false, nil
	}
	n, perr := strconv.Atoi(strings.TrimSpace(v[0]))
	if perr != nil {
		return 0, true, invalidArg("Unable to parse %s, got: %s", hdrInferHeaderLength, v[0])
	}
	if n < 0 || n > bodyLen {
		return 0, true, invalidArg("inference header size should be in range (0, %d), got: %s", bodyLen, v[0])
	}
	return n, true, nil
}

// responseEncoding picks gzip or deflate from Accept-Encoding the way
// Triton does (highest q among identity, deflate and gzip), or "".
func responseEncoding(accept string) string {
	if accept == "" {
		return ""
	}
	best, weight := "identity", 0.0
	for _, part := range strings.Split(accept, ",") {
		part = strings.TrimLeft(part, " ")
		typ, q, hasQ := strings.Cut(part, ";q=")
		typ = strings.TrimSpace(typ)
		if typ == "" {
			continue
		}
		w := 1.0
		if hasQ {
			f, err := strconv.ParseFloat(strings.TrimSpace(q), 64)
			if err != nil {
				continue
			}
			w = f
		}
		if (typ == "identity" || typ == "deflate" || typ == "gzip") && w > weight {
			best, weight = typ, w
		}
	}
	if best == "identity" {
		return ""
	}
	return best
}

// writeInferResponse writes the JSON header of resp followed by the bytes
// of its binary outputs, which are written straight from resp's Data.
func (s *Server) writeInferResponse(w http.ResponseWriter, r *http.Request, c *inferCall, resp *backendapi.InferResponse) error {
	out, binary, err := appendInferResponseJSON(c.out[:0], c, resp)
	c.out = out
	if err != nil {
		return err
	}
	h := w.Header()
	if binary > 0 {
		h[hdrContentType] = ctOctetStream
		h[hdrInferHeaderLength] = headerInt(int64(len(out)))
	} else {
		h[hdrContentType] = ctJSON
	}
	enc := responseEncoding(r.Header.Get("Accept-Encoding"))
	if enc == "" {
		total := int64(len(out)) + binary
		h["Content-Length"] = headerInt(total)
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(out); err != nil {
			return nil // the client went away; nothing to report to it
		}
		return writeBinaryOutputs(binaryWriter(w, resp, binary), c, resp)
	}
	h["Content-Encoding"] = []string{enc}
	w.WriteHeader(http.StatusOK)
	zw := getCompressor(enc, w)
	if _, err := zw.Write(out); err == nil {
		_ = writeBinaryOutputs(zw, c, resp)
	}
	_ = zw.Close()
	putCompressor(zw)
	return nil
}

// headerInts are the header values of the numbers below their count (the
// Content-Length of small replies), each made when first used and shared
// after, as ctJSON is: a header value is replaced, never written to.
var headerInts [4096]atomic.Pointer[[]string]

// headerInt returns the header value of n.
func headerInt(n int64) []string {
	if n < 0 || n >= int64(len(headerInts)) {
		return []string{strconv.FormatInt(n, 10)}
	}
	if v := headerInts[n].Load(); v != nil {
		return *v
	}
	v := []string{strconv.FormatInt(n, 10)}
	headerInts[n].Store(&v)
	return v
}

// keepMin is the size of binary outputs from which an HTTP engine that
// buffers replies is asked to write them from where they are
// (httpserve.KeepWriter) instead of copying them; below it the copy costs
// less than keeping them.
const keepMin = 64 << 10

// binaryWriter returns what the binary outputs of resp, binary bytes, are
// written to: w, or for large outputs on an engine that would copy them (the
// fasthttp engine), a writer that keeps them in the stub's memory until they
// are written, which then owns resp's release.
func binaryWriter(w http.ResponseWriter, resp *backendapi.InferResponse, binary int64) io.Writer {
	if binary < keepMin {
		return w
	}
	release := resp.TakeRelease()
	kw, ok := httpserve.KeepWriter(w, release)
	if !ok {
		resp.SetRelease(release)
	}
	return kw
}

func writeBinaryOutputs(w io.Writer, c *inferCall, resp *backendapi.InferResponse) error {
	for i := range resp.Outputs {
		o := &resp.Outputs[i]
		if o.SharedMemory != nil || len(o.Data) == 0 || c.kindOf(o.Name) != outBinary {
			continue
		}
		if _, err := w.Write(o.Data); err != nil {
			return nil // the client went away
		}
	}
	return nil
}

// appendInferResponseJSON appends the JSON header of an infer response and
// returns the byte count of the binary outputs that follow it.
func appendInferResponseJSON(dst []byte, c *inferCall, resp *backendapi.InferResponse) ([]byte, int64, error) {
	dst = append(dst, '{')
	if resp.ID != "" {
		dst = append(dst, `"id":`...)
		dst = appendJSONString(dst, resp.ID)
		dst = append(dst, ',')
	}
	name := resp.ModelName
	if name == "" {
		name = c.req.ModelName
	}
	dst = append(dst, `"model_name":`...)
	dst = appendJSONString(dst, name)
	dst = append(dst, `,"model_version":"`...)
	dst = strconv.AppendInt(dst, resp.ModelVersion, 10)
	dst = append(dst, '"')
	if len(resp.Parameters) > 0 {
		dst = append(dst, `,"parameters":`...)
		dst = appendParamsJSON(dst, resp.Parameters)
	}
	dst = append(dst, `,"outputs":[`...)
	var binary int64
	for i := range resp.Outputs {
		o := &resp.Outputs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = appendJSONString(dst, o.Name)
		dst = append(dst, `,"datatype":"`...)
		dst = append(dst, o.DataType.String()...)
		dst = append(dst, `","shape":[`...)
		for j, d := range o.Shape {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, d, 10)
		}
		dst = append(dst, ']')
		kind := c.kindOf(o.Name)
		if o.SharedMemory != nil {
			kind = outSHM
		}
		switch kind {
		case outBinary:
			dst = append(dst, `,"parameters":{"binary_data_size":`...)
			dst = strconv.AppendInt(dst, int64(len(o.Data)), 10)
			dst = append(dst, '}')
			binary += int64(len(o.Data))
		case outJSON:
			dst = append(dst, `,"data":`...)
			var err error
			if dst, err = appendJSONData(dst, o.Name, o.DataType, o.Data, elementCount(o.Shape)); err != nil {
				return dst, 0, err
			}
		}
		dst = append(dst, '}')
	}
	dst = append(dst, "]}"...)
	return dst, binary, nil
}

// appendParamsJSON appends a parameter map as a JSON object, keys sorted so
// that replies are deterministic.
func appendParamsJSON(dst []byte, params map[string]any) []byte {
	var stack [16]string
	keys := stack[:0]
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		dst = appendJSONKey(dst, i == 0, k)
		dst = appendJSONValue(dst, params[k])
	}
	return append(dst, '}')
}
