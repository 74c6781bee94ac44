package server

import (
	"compress/zlib"
	"io"

	"google.golang.org/grpc/encoding"
	// gzip registers grpc-go's gzip compressor, so requests that clients
	// compress with gzip are accepted (and answered uncompressed).
	_ "google.golang.org/grpc/encoding/gzip"
)

// This file makes the gRPC front end accept compressed requests as
// Triton's does: tritonclient's compression_algorithm offers "gzip" and
// "deflate". grpc-go ships only gzip; gRPC's "deflate" is the zlib format,
// registered here.

func init() { encoding.RegisterCompressor(deflateCompressor{}) }

// deflateCompressor is gRPC's "deflate" message encoding (zlib streams).
type deflateCompressor struct{}

func (deflateCompressor) Name() string { return "deflate" }

func (deflateCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return zlib.NewWriter(w), nil
}

func (deflateCompressor) Decompress(r io.Reader) (io.Reader, error) {
	return zlib.NewReader(r)
}
