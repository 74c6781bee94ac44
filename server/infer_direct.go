package server

import (
	"context"
	"io"
	"net/http"
	"slices"

	"github.com/stubvisor/stubvisor/backendapi"
)

// directMin is the size of a body's binary part from which it is read
// straight into the backend's memory (backendapi.InputBuffers): below it,
// the copy it saves costs less than lending the memory.
const directMin = 64 << 10

// readDirect reads a body with binary tensor data in two steps when the
// backend lends input memory: the JSON header into the call's buffer, then
// the binary part straight into a buffer of the backend's, so that the
// tensor bytes go from the socket to where the model reads them, with no
// copy in between. It applies only to an uncompressed body whose length and
// Inference-Header-Content-Length are known and valid; otherwise, or when
// the backend has no buffer to lend, ok is false with nothing read, and the
// body is read as usual. The call releases the buffer (putCall).
func (c *inferCall) readDirect(ctx context.Context, r *http.Request, b backendapi.Backend, model string, version int64, limit int64) (hdr, bin []byte, ok bool, err error) {
	ibs, can := b.(backendapi.InputBuffers)
	if !can || r.ContentLength <= 0 || r.ContentLength > limit {
		return nil, nil, false, nil
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return nil, nil, false, nil
	}
	hdrLen, given, herr := inferHeaderLength(r, int(r.ContentLength))
	binLen := int(r.ContentLength) - hdrLen
	if !given || herr != nil || binLen < directMin {
		return nil, nil, false, nil
	}
	ib := ibs.InputBuffer(ctx, model, version, binLen)
	if ib == nil {
		return nil, nil, false, nil
	}
	c.staged = ib
	c.body = slices.Grow(c.body[:0], hdrLen)[:hdrLen]
	if _, err := io.ReadFull(r.Body, c.body); err != nil {
		return nil, nil, true, invalidArg("failed to read the request body: %v", err)
	}
	bin = ib.Data[:binLen:binLen]
	if _, err := io.ReadFull(r.Body, bin); err != nil {
		return nil, nil, true, invalidArg("failed to read the request body: %v", err)
	}
	return c.body, bin, true, nil
}
