package main

// The streaming case of the http benchmark: testdata's token_gen (a
// decoupled Python model) streams 64 tokens per request to 16 concurrent
// clients, over HTTP generate_stream (Server-Sent Events) and, as its
// yardstick, over gRPC ModelStreamInfer from a second server on the same
// repository, measured in alternating rounds. tokens_per_s counts every
// token received; first_token_p50_us is the median time from sending a
// request to its first token.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

const (
	streamTokens = 64
	streamConns  = 16
	streamPrompt = "the quick brown fox jumps over the lazy dog"
)

// streamLoad is what one side of the streaming case measured.
type streamLoad struct {
	mu       sync.Mutex
	tokens   int
	firsts   []time.Duration
	firstErr error
}

func (l *streamLoad) add(tokens int, first time.Duration, measured bool, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.firstErr == nil {
			l.firstErr = err
		}
		return false
	}
	if measured {
		l.tokens += tokens
		l.firsts = append(l.firsts, first)
	}
	return true
}

// runStream runs one request per iteration from streamConns goroutines
// for warmup and then d; one returns the tokens of a request and the time
// to its first one.
func runStream(warmup, d time.Duration, one func(ctx context.Context, c int) (int, time.Duration, error)) (Stats, error) {
	start := time.Now()
	measureFrom, stopAt := start.Add(warmup), start.Add(warmup+d)
	ctx, cancel := context.WithTimeout(context.Background(), warmup+d+time.Minute)
	defer cancel()
	var l streamLoad
	var wg sync.WaitGroup
	for c := range streamConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				if t0.After(stopAt) {
					return
				}
				n, first, err := one(ctx, c)
				if !l.add(n, first, t0.After(measureFrom), err) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if l.firstErr != nil {
		return Stats{}, l.firstErr
	}
	s := summarize(l.firsts, l.tokens, time.Since(measureFrom))
	return s, nil
}

// sseOne sends one generate_stream request and counts its events.
func sseOne(cl *http.Client, url string, body []byte) (int, time.Duration, error) {
	t0 := time.Now()
	resp, err := cl.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("generate_stream: status %d", resp.StatusCode)
	}
	rd := bufio.NewReader(resp.Body)
	var first time.Duration
	n := 0
	for {
		line, err := rd.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data: ")) {
			if bytes.Contains(line, []byte(`"error"`)) {
				return n, 0, fmt.Errorf("generate_stream: %s", line)
			}
			if n == 0 {
				first = time.Since(t0)
			}
			n++
		}
		if err != nil {
			break
		}
	}
	if n != streamTokens {
		return n, 0, fmt.Errorf("generate_stream: %d tokens, want %d", n, streamTokens)
	}
	return n, first, nil
}

// grpcStreamOne sends one request on a ModelStreamInfer stream and reads
// its responses up to the empty final one.
func grpcStreamOne(st pb.GRPCInferenceService_ModelStreamInferClient, req *pb.ModelInferRequest) (int, time.Duration, error) {
	t0 := time.Now()
	if err := st.Send(req); err != nil {
		return 0, 0, err
	}
	var first time.Duration
	n := 0
	for {
		r, err := st.Recv()
		if err != nil {
			return n, 0, err
		}
		if r.ErrorMessage != "" {
			return n, 0, fmt.Errorf("ModelStreamInfer: %s", r.ErrorMessage)
		}
		if len(r.InferResponse.GetOutputs()) == 0 {
			break // the empty final response
		}
		if n == 0 {
			first = time.Since(t0)
		}
		n++
	}
	if n != streamTokens {
		return n, 0, fmt.Errorf("ModelStreamInfer: %d tokens, want %d", n, streamTokens)
	}
	return n, first, nil
}

// runStreamCase measures generate_stream on srv against ModelStreamInfer
// on a gRPC server started from env, and prints both and their ratio.
func runStreamCase(env *benchEnv, srv *benchServer, rounds int, warmup, d time.Duration) error {
	gsrv, err := env.start("gRPC")
	if err != nil {
		return err
	}
	defer gsrv.stop()
	conn, err := grpc.NewClient(gsrv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	body := fmt.Appendf(nil, `{"text_input":%q,"max_tokens":%d}`, streamPrompt, streamTokens)
	prompt := append([]byte{byte(len(streamPrompt)), 0, 0, 0}, streamPrompt...)
	req := &pb.ModelInferRequest{ModelName: "token_gen",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}}},
		Parameters: map[string]*pb.InferParameter{
			"max_tokens":                         {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: streamTokens}},
			"triton_enable_empty_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
		},
		RawInputContents: [][]byte{prompt}}
	sse := func() (Stats, error) {
		tr := &http.Transport{MaxIdleConnsPerHost: streamConns, MaxConnsPerHost: streamConns, DisableCompression: true}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr}
		url := srv.url() + "/v2/models/token_gen/generate_stream"
		return runStream(warmup, d, func(context.Context, int) (int, time.Duration, error) { return sseOne(cl, url, body) })
	}
	stream := func() (Stats, error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		streams := make([]pb.GRPCInferenceService_ModelStreamInferClient, streamConns)
		for i := range streams {
			if streams[i], err = client.ModelStreamInfer(ctx); err != nil {
				return Stats{}, err
			}
		}
		return runStream(warmup, d, func(_ context.Context, c int) (int, time.Duration, error) { return grpcStreamOne(streams[c], req) })
	}
	a, b, ratio, err := alternate(rounds, sse, stream)
	if err != nil {
		return err
	}
	const name = "64tokens-c16"
	fmt.Printf("http generate_stream-%s tokens_per_s=%.0f first_token_p50_us=%.0f\n", name, a.PerSecond, float64(a.P50)/float64(time.Microsecond))
	fmt.Printf("grpc stream_infer-%s tokens_per_s=%.0f first_token_p50_us=%.0f\n", name, b.PerSecond, float64(b.P50)/float64(time.Microsecond))
	fmt.Printf("http ratio generate_stream-%s vs_grpc_stream=%.3f\n", name, ratio)
	return nil
}
