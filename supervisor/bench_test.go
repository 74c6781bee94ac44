package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// BenchmarkInferGoAddSub measures the supervisor's side of one small
// request: Infer of testdata's go_add_sub (16 FP32 per tensor) without a
// batcher, one instance, from 1 and 16 concurrent callers. The model is
// Go-native, so the stub costs little and the allocations reported are the
// supervisor's own (the stub is another process).
//
//	go test ./supervisor -run XXX -bench InferGoAddSub -benchmem
func BenchmarkInferGoAddSub(b *testing.B) {
	repo := b.TempDir()
	dir := filepath.Join(repo, "go_add_sub")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("..", "testdata", "models", "go_add_sub"))); err != nil {
		b.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.pbtxt"))
	if err != nil {
		b.Fatal(err)
	}
	plain := strings.Replace(string(cfg), "max_batch_size: 64\ndynamic_batching {}", "max_batch_size: 0", 1)
	plain = strings.Replace(plain, "count: 2", "count: 1", 1)
	if plain == string(cfg) {
		b.Fatal("go_add_sub's config changed: update the benchmark")
	}
	if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(plain), 0o644); err != nil {
		b.Fatal(err)
	}
	// The model's sources build inside this module only: build it here.
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "1", "model"), "./testdata/models/go_add_sub/1")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	opts := DefaultOptions()
	opts.Repositories = []string{repo}
	opts.CacheDir = b.TempDir()
	opts.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr})
	s, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(10 * time.Second) })
	data := ipctest.FP32(0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5)
	one := func(ctx context.Context, req *backendapi.InferRequest, shape []int64) error {
		*req = backendapi.InferRequest{ModelName: "go_add_sub", Inputs: req.Inputs[:0]}
		req.Inputs = append(req.Inputs,
			backendapi.InputTensor{Name: "INPUT0", DataType: backendapi.TypeFP32, Shape: shape, Data: data},
			backendapi.InputTensor{Name: "INPUT1", DataType: backendapi.TypeFP32, Shape: shape, Data: data})
		resp, err := s.Infer(ctx, req)
		if err != nil {
			return err
		}
		if len(resp.Outputs) != 2 || len(resp.Outputs[0].Data) != 64 {
			b.Errorf("outputs %+v", resp.Outputs)
		}
		resp.Release()
		return nil
	}
	// The CPU time of this process (the supervisor's side, not the stub)
	// per request: on a busy machine it moves far less than the time.
	cpuTime := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, c := range []int{1, 16} {
		b.Run("c"+strconv.Itoa(c), func(b *testing.B) {
			ctx := context.Background()
			var req backendapi.InferRequest
			shape := []int64{16}
			for range 2000 { // warm up the stub and the pools
				if err := one(ctx, &req, shape); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			cpu0 := cpuTime()
			defer func() {
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			}()
			if c == 1 {
				for b.Loop() {
					if err := one(ctx, &req, shape); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism((c + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var req backendapi.InferRequest
				shape := []int64{16}
				for pb.Next() {
					if err := one(ctx, &req, shape); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
