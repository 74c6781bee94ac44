package server

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"sync"
)

// Compressed bodies and replies reuse their codecs. A new gzip or zlib
// writer allocates and clears its compressor's window and hash tables,
// about 0.8 MB, and a reader its decompressor's: for a small reply to a
// client that sends Accept-Encoding: gzip (Go's http.Client does by
// default) that was most of the request's CPU. Reset gives a used
// codec a new stream with the same settings, so pooling changes no byte
// of what goes on the wire. The pools hold what sync.Pool keeps between
// collections, so idle memory stays bounded.

var (
	gzipWriters sync.Pool // *gzip.Writer
	zlibWriters sync.Pool // *zlib.Writer
	inflaters   sync.Pool // *inflater
)

// getCompressor returns a pooled gzip (enc "gzip") or zlib ("deflate")
// writer onto w, at the default level; putCompressor gives it back after
// Close.
func getCompressor(enc string, w io.Writer) io.WriteCloser {
	if enc == "gzip" {
		if zw, ok := gzipWriters.Get().(*gzip.Writer); ok {
			zw.Reset(w)
			return zw
		}
		return gzip.NewWriter(w)
	}
	if zw, ok := zlibWriters.Get().(*zlib.Writer); ok {
		zw.Reset(w)
		return zw
	}
	return zlib.NewWriter(w)
}

// putCompressor drops the writer's destination and pools it.
func putCompressor(zw io.WriteCloser) {
	switch zw := zw.(type) {
	case *gzip.Writer:
		zw.Reset(nil)
		gzipWriters.Put(zw)
	case *zlib.Writer:
		zw.Reset(nil)
		zlibWriters.Put(zw)
	}
}

// inflater reads a gzip or zlib body held in memory, keeping a decoder
// of each kind once made.
type inflater struct {
	src bytes.Reader
	gz  *gzip.Reader
	zl  io.ReadCloser // a zlib.Resetter
	cur io.Reader
}

// getInflater returns a pooled reader of the gzip (enc "gzip") or zlib
// ("deflate") stream in body, or the stream's header error. The caller
// releases it when done, or at once on error.
func getInflater(enc string, body []byte) (*inflater, error) {
	f, _ := inflaters.Get().(*inflater)
	if f == nil {
		f = new(inflater)
	}
	f.src.Reset(body)
	var err error
	switch {
	case enc == "gzip" && f.gz != nil:
		err = f.gz.Reset(&f.src)
	case enc == "gzip":
		f.gz, err = gzip.NewReader(&f.src)
	case f.zl != nil:
		err = f.zl.(zlib.Resetter).Reset(&f.src, nil)
	default:
		f.zl, err = zlib.NewReader(&f.src)
	}
	if enc == "gzip" {
		f.cur = f.gz
	} else {
		f.cur = f.zl
	}
	return f, err
}

func (f *inflater) Read(p []byte) (int, error) { return f.cur.Read(p) }

// release lets go of the body and pools the reader.
func (f *inflater) release() {
	f.src.Reset(nil)
	f.cur = nil
	inflaters.Put(f)
}
