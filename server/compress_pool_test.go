package server

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// TestPooledCodecs reuses the pooled codecs across encodings, corrupt
// streams and payloads: a reused writer must write the very bytes a new
// one does, and a reader reused after a failed stream must read the next
// one whole.
func TestPooledCodecs(t *testing.T) {
	payloads := [][]byte{[]byte(`{"a":1}`), bytes.Repeat([]byte("stubvisor "), 5000), nil}
	fresh := map[string]func(io.Writer) io.WriteCloser{
		"gzip":    func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) },
		"deflate": func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) },
	}
	for round := 0; round < 3; round++ {
		for _, enc := range []string{"gzip", "deflate"} {
			for _, p := range payloads {
				var want, got bytes.Buffer
				zw := fresh[enc](&want)
				_, _ = zw.Write(p)
				_ = zw.Close()
				pw := getCompressor(enc, &got)
				if _, err := pw.Write(p); err != nil {
					t.Fatal(err)
				}
				if err := pw.Close(); err != nil {
					t.Fatal(err)
				}
				putCompressor(pw)
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					t.Fatalf("%s round %d: pooled writer wrote %d bytes unlike a new one's %d", enc, round, got.Len(), want.Len())
				}

				if f, err := getInflater(enc, []byte("not compressed")); err == nil {
					t.Fatalf("%s: a corrupt stream was accepted", enc)
				} else {
					f.release()
				}
				f, err := getInflater(enc, got.Bytes())
				if err != nil {
					t.Fatalf("%s round %d: %v", enc, round, err)
				}
				back, err := io.ReadAll(f)
				f.release()
				if err != nil || !bytes.Equal(back, p) {
					t.Fatalf("%s round %d: read back %d bytes (%v), want %d", enc, round, len(back), err, len(p))
				}
			}
		}
	}
}

// BenchmarkCompressedReply writes the small infer reply to a client that
// accepts gzip, as Go's http.Client does unless told otherwise.
func BenchmarkCompressedReply(b *testing.B) {
	srv, err := New(newEchoBackend(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := getCall()
	defer putCall(c)
	resp := &backendapi.InferResponse{ModelName: "identity", ModelVersion: 1,
		Outputs: []backendapi.OutputTensor{{Name: "OUTPUT0", DataType: backendapi.TypeFP32, Shape: []int64{1, 16},
			Data: ipctest.FP32(0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5)}}}
	r := httptest.NewRequest(http.MethodPost, "/v2/models/identity/infer", strings.NewReader(smallJSONBody))
	r.Header.Set("Accept-Encoding", "gzip")
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		if err := srv.writeInferResponse(w, r, c, resp); err != nil {
			b.Fatal(err)
		}
	}
}
