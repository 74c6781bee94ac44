package main

// The grpc subcommand: KServe v2 gRPC ModelInfer against the built
// bin/stubvisor, N concurrent callers on one HTTP/2 connection, next to a
// yardstick measured in the same run: a trivial grpc-go service with the
// same message types that echoes inputs as outputs.

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

func init() {
	register("grpc", "KServe v2 gRPC ModelInfer against bin/stubvisor, with a grpc-go echo yardstick", runGRPCBench)
}

// benchModels are the model configurations the bench writes into its
// temporary repository (model.py files come from testdata/models).
var benchModels = []benchModel{
	{"add_sub", "add_sub", addSubConfig("add_sub", "max_batch_size: 0", 1)},
	{"add_sub_batched", "add_sub", addSubConfig("add_sub_batched", "max_batch_size: 64\ndynamic_batching {}", 2)},
	{"identity_fp32", "identity_fp32", ""},
	{"go_add_sub", "go_add_sub", ""},
}

// addSubConfig is add_sub over 16-element FP32 tensors under name, with
// the batching lines given and count instances.
func addSubConfig(name, batching string, count int) string {
	return fmt.Sprintf(`name: %q
backend: "python"
%s
input [
  { name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] },
  { name: "INPUT1", data_type: TYPE_FP32, dims: [ 16 ] }
]
output [
  { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] },
  { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 16 ] }
]
instance_group [{ kind: KIND_CPU, count: %d }]
`, name, batching, count)
}

// grpcCase is one measured configuration.
type grpcCase struct {
	name        string
	concurrency int
	req         *pb.ModelInferRequest
	// versus names the case this one is compared with, measured in the
	// same rounds; empty means the echo service under the same load.
	versus string
}

func fp32Bytes(n int) []byte {
	b := make([]byte, 0, 4*n)
	for i := 0; i < n; i++ {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(i)))
	}
	return b
}

func addSubRequest(model string, batched bool) *pb.ModelInferRequest {
	shape := []int64{16}
	if batched {
		shape = []int64{1, 16}
	}
	return &pb.ModelInferRequest{
		ModelName: model,
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "FP32", Shape: shape},
			{Name: "INPUT1", Datatype: "FP32", Shape: shape},
		},
		RawInputContents: [][]byte{fp32Bytes(16), fp32Bytes(16)},
	}
}

func runGRPCBench(args []string) error {
	fs := flag.NewFlagSet("grpc", flag.ContinueOnError)
	duration := fs.Duration("duration", 2*time.Second, "measured time per case and round")
	rounds := fs.Int("rounds", 3, "rounds per case, alternating with what it is compared to; medians are printed")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured time before each case")
	sf := addServerFlags(fs)
	spin := fs.String("stub-spin", "", "passed to stubvisor --stub-spin when set (default: the server's default)")
	only := fs.String("case", "", "run only the cases whose name contains this")
	if err := fs.Parse(args); err != nil {
		return err
	}
	env, err := newBenchEnv("grpc", sf, benchModels...)
	if err != nil {
		return err
	}
	defer env.close()
	var extra []string
	if *spin != "" {
		extra = append(extra, "--stub-spin", *spin)
	}
	srv, err := env.start("gRPC", extra...)
	if err != nil {
		return err
	}
	defer srv.stop()

	echoAddr, stopEcho, err := startEcho()
	if err != nil {
		return err
	}
	defer stopEcho()

	cases := []grpcCase{
		{"add_sub-16xFP32-c1", 1, addSubRequest("add_sub", false), ""},
		{"add_sub-16xFP32-c16", 16, addSubRequest("add_sub", false), ""},
		{"add_sub-16xFP32-c16-batched", 16, addSubRequest("add_sub_batched", true), "add_sub-16xFP32-c16"},
		// The ceiling for batching here: the same batcher and instances
		// with a model that costs next to nothing.
		{"add_sub-16xFP32-c16-batched-go", 16, addSubRequest("go_add_sub", true), "add_sub-16xFP32-c16"},
		{"identity-4MiB-c1", 1, &pb.ModelInferRequest{
			ModelName:        "identity_fp32",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1 << 20}}},
			RawInputContents: [][]byte{fp32Bytes(1 << 20)},
		}, ""},
	}
	byName := map[string]grpcCase{}
	for _, c := range cases {
		byName[c.name] = c
	}
	for _, c := range cases {
		if *only != "" && !strings.Contains(c.name, *only) {
			continue
		}
		other, otherAddr, otherName := c, echoAddr, "yardstick-"+c.name
		if c.versus != "" {
			other, otherAddr, otherName = byName[c.versus], srv.addr, c.versus
		}
		s, y, ratio, err := alternate(*rounds,
			func() (Stats, error) { return loadGRPC(srv.addr, c, *warmup, *duration) },
			func() (Stats, error) { return loadGRPC(otherAddr, other, *warmup, *duration) })
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		printGRPC(c.name, s)
		if c.versus == "" {
			printGRPC(otherName, y)
			otherName = "yardstick"
		}
		fmt.Printf("grpc ratio %s/%s=%.3f\n", c.name, otherName, ratio)
		if strings.Contains(c.name, "batched") {
			if err := printBatching(srv.addr, c.req.ModelName); err != nil {
				return err
			}
		}
	}
	return nil
}

// printBatching prints the mean batch size so far from the statistics
// extension: how much the dynamic batcher merged.
func printBatching(addr, model string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := pb.NewGRPCInferenceServiceClient(conn).ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: model})
	if err != nil {
		return err
	}
	for _, m := range st.ModelStats {
		if m.ExecutionCount > 0 {
			fmt.Printf("grpc batching %s inferences=%d executions=%d mean_batch=%.2f\n", model,
				m.InferenceCount, m.ExecutionCount, float64(m.InferenceCount)/float64(m.ExecutionCount))
		}
	}
	return nil
}

func printGRPC(name string, s Stats) {
	fmt.Printf("grpc %s rps=%.0f p50_us=%.0f p99_us=%.0f\n", name, s.PerSecond,
		float64(s.P50)/float64(time.Microsecond), float64(s.P99)/float64(time.Microsecond))
}

// dialGRPC connects to a server under test over plaintext, with no message
// size limit on either side, as every gRPC load of the benchmarks does.
func dialGRPC(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))
}

// loadGRPC runs c.concurrency callers on one connection for warmup, then
// measures for d. Every response is checked for the right output count.
func loadGRPC(addr string, c grpcCase, warmup, d time.Duration) (Stats, error) {
	samples, err := grpcLoad(addr, c.concurrency, warmup, d, false, func(ctx context.Context, client pb.GRPCInferenceServiceClient) error {
		r, err := client.ModelInfer(ctx, c.req)
		if err == nil && len(r.RawOutputContents) == 0 {
			err = errors.New("response without raw outputs")
		}
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	return summarize(samples, len(samples), d), nil
}

// grpcLoad runs closedLoop's callers of call on one connection to addr,
// under a context that outlives the run by a minute.
func grpcLoad(addr string, conc int, warmup, d time.Duration, byEnd bool, call func(context.Context, pb.GRPCInferenceServiceClient) error) ([]time.Duration, error) {
	conn, err := dialGRPC(addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), warmup+d+time.Minute)
	defer cancel()
	return closedLoop(conc, warmup, d, byEnd, func() error { return call(ctx, client) })
}

// echoService is the yardstick: ModelInfer returns the inputs as outputs
// (same names, types, shapes and raw bytes) and does nothing else.
type echoService struct {
	pb.UnimplementedGRPCInferenceServiceServer
}

func (echoService) ModelInfer(_ context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	out := &pb.ModelInferResponse{ModelName: req.ModelName, ModelVersion: "1", Id: req.Id,
		Outputs: make([]*pb.ModelInferResponse_InferOutputTensor, len(req.Inputs)), RawOutputContents: req.RawInputContents}
	for i, in := range req.Inputs {
		out.Outputs[i] = &pb.ModelInferResponse_InferOutputTensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}
	}
	return out, nil
}

func startEcho() (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(math.MaxInt32), grpc.MaxSendMsgSize(math.MaxInt32))
	pb.RegisterGRPCInferenceServiceServer(s, echoService{})
	done := make(chan struct{})
	go func() {
		_ = s.Serve(l)
		close(done)
	}()
	return l.Addr().String(), func() { s.Stop(); <-done }, nil
}
