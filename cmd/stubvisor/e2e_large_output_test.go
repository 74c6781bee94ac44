package main

// Large binary outputs over HTTP on both engines: net/http writes them to
// the socket from the stub's memory as the handler runs; the fasthttp
// engine keeps that memory after the handler returns and writes them from
// there. Either way the bytes must arrive whole and the memory must come
// back once they are written, or when the client hangs up halfway.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

func TestLargeBinaryOutputs(t *testing.T) {
	ipctest.RequirePython(t)
	const n = 1 << 19 // 2 MiB of FP32 a tensor
	for _, engine := range []string{"net/http", "fasthttp"} {
		t.Run(engine, func(t *testing.T) {
			s := startServer(t, largeTensorRepo(t), "--http-engine", engine)
			addr := strings.TrimPrefix(s.HTTP, "http://")
			// pair's OUTPUT0 is its input's block in the stub's arena,
			// OUTPUT1 an array the stub made there.
			request := func(seed int) (body []byte, hdr int, in0, in1 []byte) {
				in0, in1 = fp32Ramp(n, float32(seed)), fp32Ramp(n, -float32(seed))
				body, hdr = httpBinaryBody(t, map[string]any{
					"inputs": []map[string]any{
						{"name": "INPUT0", "shape": []int{n}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 4 * n}},
						{"name": "INPUT1", "shape": []int{n}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 4 * n}},
					},
					"parameters": map[string]any{"binary_data_output": true},
				}, in0, in1)
				return body, hdr, in0, in1
			}
			send := func(t *testing.T, c net.Conn, seed int) (in0, in1 []byte) {
				t.Helper()
				body, hdr, in0, in1 := request(seed)
				if _, err := fmt.Fprintf(c, "POST /v2/models/pair/infer HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n"+
					"Inference-Header-Content-Length: %d\r\n\r\n%s", addr, len(body), hdr, body); err != nil {
					t.Fatal(err)
				}
				return in0, in1
			}
			t.Run("replies arrive whole, request after request, and the memory comes back", func(t *testing.T) {
				c, rd := dialHTTP(t, addr)
				for i := range 12 {
					in0, in1 := send(t, c, i)
					resp := readResponse(t, rd)
					r := httpDecodeInfer(t, resp.code, resp.h, resp.body)
					if !bytes.Equal(r.Blobs["OUTPUT0"], in0) || !bytes.Equal(r.Blobs["OUTPUT1"], fp32Scaled(in1, 2)) {
						t.Fatalf("request %d: the outputs are not INPUT0 and INPUT1 doubled", i)
					}
				}
				waitPoolFree(t, s, "pair")
			})
			t.Run("a client that hangs up mid-body gives the memory back", func(t *testing.T) {
				// A small receive buffer: the 4 MiB reply cannot fit in the
				// sockets' buffers while the client does not read.
				d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
					return rc.Control(func(fd uintptr) {
						_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
					})
				}}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				_ = c.SetDeadline(time.Now().Add(60 * time.Second))
				send(t, c, 1)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusOK || resp.ContentLength <= 2*4*n {
					t.Fatalf("reply %d, length %d, want 200 and the two outputs after the header", resp.StatusCode, resp.ContentLength)
				}
				if _, err := io.ReadFull(resp.Body, make([]byte, 4096)); err != nil {
					t.Fatal(err)
				}
				if st := oneStub(t, s, "pair"); st.PoolInUse == 0 {
					t.Fatal("the stub's memory is free while its reply is still being written")
				}
				_ = c.(*net.TCPConn).SetLinger(0)
				_ = c.Close()
				waitPoolFree(t, s, "pair")
				c2, rd := dialHTTP(t, addr)
				in0, _ := send(t, c2, 2)
				resp2 := readResponse(t, rd)
				if r := httpDecodeInfer(t, resp2.code, resp2.h, resp2.body); !bytes.Equal(r.Blobs["OUTPUT0"], in0) {
					t.Fatal("request after the hang-up: OUTPUT0 is not INPUT0")
				}
			})
		})
	}
}
