package main

import (
	"context"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// grpcClient dials s.GRPC and closes the connection at cleanup.
func grpcClient(t *testing.T, s *server) (*grpc.ClientConn, pb.GRPCInferenceServiceClient) {
	t.Helper()
	if s.GRPC == "" {
		t.Fatal("the server has no gRPC listener")
	}
	conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, pb.NewGRPCInferenceServiceClient(conn)
}

// callCtx bounds one RPC.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantStatus fails unless err is a gRPC status with code and a message
// containing text.
func wantStatus(t *testing.T, err error, code codes.Code, text string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || err == nil {
		t.Fatalf("got error %v, want status %s %q", err, code, text)
	}
	if st.Code() != code || !strings.Contains(st.Message(), text) {
		t.Fatalf("got status %s %q, want %s containing %q", st.Code(), st.Message(), code, text)
	}
}

func int64Param(v int64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
}

func boolParam(v bool) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: v}}
}

// outputByName returns the output and its raw bytes.
func outputByName(t *testing.T, r *pb.ModelInferResponse, name string) (*pb.ModelInferResponse_InferOutputTensor, []byte) {
	t.Helper()
	if len(r.RawOutputContents) != len(r.Outputs) {
		t.Fatalf("%d raw_output_contents for %d outputs", len(r.RawOutputContents), len(r.Outputs))
	}
	for i, o := range r.Outputs {
		if o.Name == name {
			return o, r.RawOutputContents[i]
		}
	}
	t.Fatalf("no output %s in %v", name, r.Outputs)
	return nil, nil
}

// streamReceiver is the receiving side of a ModelStreamInfer stream.
type streamReceiver interface {
	Recv() (*pb.ModelStreamInferResponse, error)
}

// recvEach calls each on every message of a ModelStreamInfer stream until
// the stream ends or each returns false, failing the test on a transport
// error. In-band error messages go to each.
func recvEach(t *testing.T, st streamReceiver, each func(*pb.ModelStreamInferResponse) bool) {
	t.Helper()
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !each(m) {
			return
		}
	}
}

// recvStream reads a ModelStreamInfer stream to its end and returns its
// messages, failing the test on a transport error or an error message.
func recvStream(t *testing.T, st streamReceiver) []*pb.ModelStreamInferResponse {
	t.Helper()
	var ms []*pb.ModelStreamInferResponse
	recvEach(t, st, func(m *pb.ModelStreamInferResponse) bool {
		if m.ErrorMessage != "" {
			t.Fatalf("stream error: %s", m.ErrorMessage)
		}
		ms = append(ms, m)
		return true
	})
	return ms
}
