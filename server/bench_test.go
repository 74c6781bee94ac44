package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// The benchmarks measure the front end's own cost. The figure that matters
// is the ratio of small-JSON infer throughput to a trivial net/http handler
// on the same machine and in the same run (target >= 0.35 at 16 concurrent
// clients): run
//
//	go test ./server -run XXX -bench 'HTTPSmallJSON' -benchtime 3s
//
// and compare the req/s of the two sub-benchmarks.

// smallJSONBody is the "small" request of the project's benchmarks: 16
// FP32 values in KServe v2 JSON.
const smallJSONBody = `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[0.5,1.5,2.5,3.5,4.5,5.5,6.5,7.5,8.5,9.5,10.5,11.5,12.5,13.5,14.5,15.5]}]}`

// echoBackend is identity without bookkeeping, so that the benchmark sees
// the front end's costs only.
type echoBackend struct {
	*testBackend
	cfg *inferencepb.ModelConfig
}

func newEchoBackend() echoBackend {
	b := newTestBackend()
	cfg, _ := b.config("identity")
	return echoBackend{b, cfg}
}

func (e echoBackend) ModelConfig(context.Context, string, int64) (*inferencepb.ModelConfig, error) {
	return e.cfg, nil
}

func (e echoBackend) Infer(_ context.Context, req *backendapi.InferRequest) (*backendapi.InferResponse, error) {
	in := &req.Inputs[0]
	resp := &backendapi.InferResponse{ModelName: req.ModelName, ModelVersion: 1,
		Outputs: []backendapi.OutputTensor{{Name: "OUTPUT0", DataType: in.DataType, Shape: in.Shape, Data: in.Data}}}
	return resp, nil
}

func BenchmarkParseSmallJSON(b *testing.B) {
	body := []byte(smallJSONBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		c := getCall()
		if err := c.parseInferHeader("identity", body, nil, false); err != nil {
			b.Fatal(err)
		}
		putCall(c)
	}
}

func BenchmarkEncodeSmallJSON(b *testing.B) {
	c := getCall()
	defer putCall(c)
	resp := &backendapi.InferResponse{ModelName: "identity", ModelVersion: 1,
		Outputs: []backendapi.OutputTensor{{Name: "OUTPUT0", DataType: backendapi.TypeFP32, Shape: []int64{1, 16},
			Data: ipctest.FP32(0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5)}}}
	b.ReportAllocs()
	var out []byte
	for b.Loop() {
		var err error
		if out, _, err = appendInferResponseJSON(out[:0], c, resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHTTPSmallJSON runs 16 concurrent clients over loopback against a
// trivial handler (the yardstick) and against the infer endpoint with an
// in-process identity backend.
func BenchmarkHTTPSmallJSON(b *testing.B) {
	srv, err := New(newEchoBackend(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	reply := []byte(`{"model_name":"identity","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[1,16],"data":[0.5,1.5,2.5,3.5,4.5,5.5,6.5,7.5,8.5,9.5,10.5,11.5,12.5,13.5,14.5,15.5]}]}`)
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	})
	for _, bc := range []struct {
		name string
		h    http.Handler
		path string
	}{
		{"echo", echo, "/"},
		{"infer", srv.HTTPHandler(), "/v2/models/identity/infer"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ts := httptest.NewServer(bc.h)
			defer ts.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			url := ts.URL + bc.path
			body := []byte(smallJSONBody)
			// RunParallel starts parallelism*GOMAXPROCS goroutines: make it 16.
			b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(url, "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
