package server

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// streamState is one ModelStreamInfer call.
type streamState struct {
	g      *GRPCServer
	stream grpc.BidiStreamingServer[pb.ModelInferRequest, pb.ModelStreamInferResponse]
	ctx    context.Context
	cancel context.CancelFunc
	// statusOnError: the first error ends the stream with a status
	// (headerGRPCError).
	statusOnError bool

	mu     sync.Mutex // serialises Send and guards the fields below
	closed bool       // nothing more may be sent
	fatal  error      // the status the stream ends with
	wg     sync.WaitGroup
	seq    map[backendapi.CorrelationID]chan struct{}
	// lastQueued is closed when the latest request outside a sequence has
	// its place in its model's queue (or has ended). The next one waits
	// for it, so requests sent in order are batched in that order. Only
	// the receiving loop touches it.
	lastQueued chan struct{}
}

// ModelStreamInfer serves a bidirectional stream: every request runs
// concurrently with the others (responses of different requests may
// interleave), but each enters its model's queue in arrival order, so a
// dynamic batch holds them in the order they were sent, and requests of
// one sequence run in arrival order.
// A decoupled model may send any number of responses per request, each
// with the triton_final_response parameter. Errors travel in-band as
// error_message unless the client opened the stream with the
// triton_grpc_error header, in which case the first error ends the stream
// with its status.
func (g *GRPCServer) ModelStreamInfer(stream grpc.BidiStreamingServer[pb.ModelInferRequest, pb.ModelStreamInferResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	st := &streamState{g: g, stream: stream, ctx: ctx, cancel: cancel, seq: map[backendapi.CorrelationID]chan struct{}{}}
	if md, ok := metadata.FromIncomingContext(stream.Context()); ok {
		for _, v := range md.Get(headerGRPCError) {
			if v == "true" {
				st.statusOnError = true
			}
		}
	}
	reqs := make(chan *pb.ModelInferRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	var result error
loop:
	for {
		select {
		case req := <-reqs:
			st.start(req)
		case err := <-recvErr:
			if !errors.Is(err, io.EOF) {
				result = err
				cancel()
			}
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	st.wg.Wait()
	st.mu.Lock()
	st.closed = true
	if st.fatal != nil {
		result = st.fatal
	}
	st.mu.Unlock()
	if result != nil {
		if _, ok := status.FromError(result); !ok {
			result = status.FromContextError(result).Err()
		}
	}
	return result
}

// start runs one request of the stream in its own goroutine.
func (st *streamState) start(req *pb.ModelInferRequest) {
	var ir backendapi.InferRequest
	held := int64(proto.Size(req))
	if err := st.g.budget.acquire(held); err != nil {
		takeStaged(req).Release()
		st.fail(req, &ir, status.Error(codes.ResourceExhausted, err.Error()))
		return
	}
	opts, err := parseGRPCInfer(req, &ir)
	if err != nil {
		ir.InputBuffer.Release()
		st.g.budget.release(held)
		st.fail(req, &ir, st.g.requestError(st.ctx, req, err))
		return
	}
	if err := st.g.forwardMetadata(st.ctx, &ir); err != nil {
		ir.InputBuffer.Release()
		st.fail(req, &ir, err)
		return
	}
	var prev chan struct{}
	var mine chan struct{}
	// Requests of a sequence keep their order by waiting for the one
	// before them to end; the others wait only until the one before them
	// is queued.
	var before, queued chan struct{}
	if !ir.CorrelationID.IsZero() {
		mine = make(chan struct{})
		st.mu.Lock()
		prev = st.seq[ir.CorrelationID]
		st.seq[ir.CorrelationID] = mine
		st.mu.Unlock()
	} else {
		before, queued = st.lastQueued, make(chan struct{})
		st.lastQueued = queued
		var once sync.Once
		ir.Queued = func() { once.Do(func() { close(queued) }) }
	}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		defer st.g.budget.release(held)
		defer ir.InputBuffer.Release()
		if queued != nil {
			defer ir.Queued()
			if before != nil {
				select {
				case <-before:
				case <-st.ctx.Done():
					return
				}
			}
		}
		if mine != nil {
			defer func() {
				close(mine)
				st.mu.Lock()
				if st.seq[ir.CorrelationID] == mine {
					delete(st.seq, ir.CorrelationID)
				}
				st.mu.Unlock()
			}()
		}
		if prev != nil {
			select {
			case <-prev:
			case <-st.ctx.Done():
				return
			}
		}
		st.run(req, &ir, opts)
	}()
}

func (st *streamState) run(req *pb.ModelInferRequest, ir *backendapi.InferRequest, opts grpcInferOptions) {
	version := ""
	v, _ := parseModelVersion(req.GetModelVersion())
	tr := st.g.tracer.StartGRPC(st.ctx, req.GetModelName(), v)
	defer tr.End()
	tr.Submit(ir)
	err := st.g.backend.InferStream(st.ctx, ir, func(resp *backendapi.InferResponse, err error, final bool) {
		if err == nil {
			tr.Response(resp)
		}
		// The stub protocol does not tell a response without outputs from
		// the bare final flag of a decoupled model (send(flags=FINAL)),
		// so a final response with neither outputs nor parameters is
		// taken for the flag: Triton sends nothing for it unless the
		// client asked for an empty final response.
		flagOnly := resp == nil || final && len(resp.Outputs) == 0 && len(resp.Parameters) == 0
		switch {
		case err != nil:
			st.fail(req, ir, err)
		case !flagOnly:
			out := buildGRPCResponse(resp, ir)
			version = out.ModelVersion
			if out.Parameters == nil {
				out.Parameters = make(map[string]*pb.InferParameter, 1)
			}
			out.Parameters[paramFinalResponse] = grpcParameter(final)
			st.send(&pb.ModelStreamInferResponse{InferResponse: out})
		case final && opts.emptyFinal:
			if resp != nil {
				version = strconv.FormatInt(resp.ModelVersion, 10)
			}
			if version == "" && ir.ModelVersion > 0 {
				version = strconv.FormatInt(ir.ModelVersion, 10)
			}
			st.send(&pb.ModelStreamInferResponse{InferResponse: &pb.ModelInferResponse{
				ModelName:    ir.ModelName,
				ModelVersion: version,
				Id:           ir.ID,
				Parameters:   map[string]*pb.InferParameter{paramFinalResponse: grpcParameter(true)},
			}})
		}
	})
	if err != nil {
		st.fail(req, ir, err)
	}
}

// fail reports the error of one request: in-band, or as the stream's
// status when the client asked for that.
func (st *streamState) fail(req *pb.ModelInferRequest, ir *backendapi.InferRequest, err error) {
	if st.statusOnError {
		st.mu.Lock()
		if st.fatal == nil {
			st.fatal = grpcError(err)
		}
		st.closed = true
		st.mu.Unlock()
		st.cancel()
		return
	}
	st.send(&pb.ModelStreamInferResponse{
		ErrorMessage: backendapi.MessageOf(err),
		InferResponse: &pb.ModelInferResponse{
			ModelName:    req.GetModelName(),
			ModelVersion: req.GetModelVersion(),
			Id:           req.GetId(),
		},
	})
}

// send writes one message unless the stream is closing. A send error means
// the client is gone; the stream context ends the rest.
func (st *streamState) send(m *pb.ModelStreamInferResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return
	}
	if err := st.stream.Send(m); err != nil {
		st.closed = true
		st.cancel()
	}
}
