package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/server/trace"
)

// MaxGRPCMessageSize is the largest gRPC message the front end accepts or
// sends: 2 GiB - 1, what Triton and tritonclient use, so that large
// tensors travel in one message.
const MaxGRPCMessageSize = math.MaxInt32

// GRPCOptions configures a GRPCServer. The zero value is usable.
type GRPCOptions struct {
	// Version is the server version that ServerMetadata reports.
	Version string
	// Extensions are the extensions ServerMetadata lists; nil means
	// every extension this server implements, in Triton's order.
	Extensions []string
	// Logger receives the front end's logs; it is also the logger whose
	// level LogSettings reads and sets. Nil discards logs.
	Logger hclog.Logger
	// HTTP, when set, is the HTTP front end of the same process: the two
	// then share one set of log settings, as Triton's front ends do.
	HTTP *Server
	// MaxMessageSize is the largest request or response message
	// (default MaxGRPCMessageSize).
	MaxMessageSize int
	// BodyTimeout bounds how long the request message of a unary RPC may
	// take to arrive after its headers: the timeout plus the largest
	// message at 8 MiB/s (default DefaultBodyTimeout).
	BodyTimeout time.Duration
	// MaxInflightBytes is the budget of request bytes held by requests in
	// flight (default DefaultMaxInflightBytes); with HTTP set, the HTTP
	// server's budget is shared instead.
	MaxInflightBytes int64
	// ServerOptions are appended to the grpc.Server options (tests and
	// benchmarks use them for interceptors).
	ServerOptions []grpc.ServerOption
	// HeaderForwardPattern, when set, forwards the request metadata whose
	// keys it matches to the model as string parameters
	// (--grpc-header-forward-pattern): a regular expression matched as Triton
	// does, in part and case-insensitively unless it says (?-i).
	HeaderForwardPattern string
	// Restrictions puts API groups behind metadata keys
	// (--grpc-restricted-protocol); nil restricts nothing.
	Restrictions *Restrictions
}

// GRPCServer serves a backendapi.Backend as Triton's
// inference.GRPCInferenceService, plus the standard health service and
// server reflection (so that grpcurl and grpc_health_probe work without
// proto files).
type GRPCServer struct {
	pb.UnimplementedGRPCInferenceServiceServer

	backend  backendapi.Backend
	forward  *regexp.Regexp // header forward pattern, or nil
	log      hclog.Logger
	metadata *pb.ServerMetadataResponse
	logging  *logSettings
	tracer   *trace.Tracer
	srv      *grpc.Server
	health   *health.Server
	budget   *byteBudget
}

// NewGRPC returns a GRPCServer for backend; Serve starts it.
// streamWorkers is the number of goroutines kept to serve RPCs.
const streamWorkers = 64

func NewGRPC(backend backendapi.Backend, opts GRPCOptions) (*GRPCServer, error) {
	if backend == nil {
		return nil, errors.New("server: new grpc: nil backend")
	}
	if opts.Version == "" {
		opts.Version = defaultVersion
	}
	if opts.Extensions == nil {
		opts.Extensions = defaultExtensions
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	forward, err := compileForwardPattern(opts.HeaderForwardPattern)
	if err != nil {
		return nil, err
	}
	if opts.MaxMessageSize <= 0 {
		opts.MaxMessageSize = MaxGRPCMessageSize
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	g := &GRPCServer{
		forward: forward,
		backend: backend,
		log:     opts.Logger,
		metadata: &pb.ServerMetadataResponse{
			Name:       serverName,
			Version:    opts.Version,
			Extensions: append([]string(nil), opts.Extensions...),
		},
	}
	if opts.HTTP != nil {
		g.logging = opts.HTTP.logging
		g.tracer = opts.HTTP.tracer
		g.budget = opts.HTTP.budget
	} else {
		g.logging = newLogSettings(opts.Logger)
		g.budget = newByteBudget(opts.MaxInflightBytes)
		var err error
		if g.tracer, err = trace.New(DefaultTraceConfig(), opts.Logger, traceJSON{}); err != nil {
			return nil, fmt.Errorf("server: new grpc: %w", err)
		}
	}
	restrict := grpcRestrictor{opts.Restrictions}
	stall := newGRPCStall(grpcBodyBound(opts.BodyTimeout, opts.MaxMessageSize),
		&pb.GRPCInferenceService_ServiceDesc, &healthpb.Health_ServiceDesc)
	sopts := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxMessageSize),
		grpc.MaxSendMsgSize(opts.MaxMessageSize),
		grpc.InTapHandle(stall.tap),
		grpc.ChainUnaryInterceptor(stall.intercept, restrict.unary),
		grpc.ChainStreamInterceptor(restrict.stream),
		// Reused stream goroutines keep the stacks an infer call grows;
		// a fresh goroutine per RPC spent ~6% of the server's CPU copying
		// its stack as it grew. Beyond these, grpc-go starts goroutines.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ForceServerCodecV2(newTensorCodec(backend)),
		experimental.BufferPool(grpcPool),
	}, opts.ServerOptions...)
	g.srv = grpc.NewServer(sopts...)
	pb.RegisterGRPCInferenceServiceServer(g.srv, g)
	g.health = health.NewServer()
	healthpb.RegisterHealthServer(g.srv, liveHealth{Server: g.health, backend: backend})
	reflection.Register(g.srv)
	if err := checkGroups(g.srv); err != nil {
		return nil, err
	}
	return g, nil
}

// GRPC returns the underlying grpc.Server (to register more services).
func (g *GRPCServer) GRPC() *grpc.Server { return g.srv }

// Serve serves on l until Stop or GracefulStop. It returns nil after a
// stop.
func (g *GRPCServer) Serve(l net.Listener) error {
	err := g.srv.Serve(l)
	if err == nil || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return fmt.Errorf("server: serve grpc %s: %w", l.Addr(), err)
}

// GracefulStop marks the server NOT_SERVING, stops accepting RPCs and waits
// for the running ones (streams included) until ctx is done; then it closes
// every connection.
func (g *GRPCServer) GracefulStop(ctx context.Context) {
	g.health.Shutdown()
	done := make(chan struct{})
	go func() {
		g.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		g.srv.Stop()
		<-done
	}
}

// Stop closes every connection and listener at once.
func (g *GRPCServer) Stop() {
	g.health.Shutdown()
	g.srv.Stop()
}

// liveHealth answers grpc.health.v1.Health/Check from the backend: SERVING
// while the server is live (Triton's rule), NOT_SERVING otherwise. Watch
// and List come from the standard implementation, which turns NOT_SERVING
// at shutdown.
type liveHealth struct {
	*health.Server
	backend backendapi.Backend
}

func (h liveHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	resp, err := h.Server.Check(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.Status == healthpb.HealthCheckResponse_SERVING && !h.backend.Live() {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return resp, nil
}

// grpcCode maps an error class to the gRPC status code Triton uses for it
// (grpc_utils.cc GrpcStatusUtil::CodeToStatus).
func grpcCode(c backendapi.Code) codes.Code {
	switch c {
	case backendapi.Internal:
		return codes.Internal
	case backendapi.NotFound:
		return codes.NotFound
	case backendapi.InvalidArg:
		return codes.InvalidArgument
	case backendapi.Unavailable:
		return codes.Unavailable
	case backendapi.Unsupported:
		return codes.Unimplemented
	case backendapi.AlreadyExists:
		return codes.AlreadyExists
	case backendapi.Cancelled:
		return codes.Canceled
	default:
		return codes.Unknown
	}
}

// grpcError turns a backend or front-end error into a gRPC status carrying
// the client-facing text.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(grpcCode(backendapi.CodeOf(err)), backendapi.MessageOf(err))
}

func (g *GRPCServer) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: g.backend.Live()}, nil
}

func (g *GRPCServer) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: g.backend.Ready()}, nil
}

// ModelReady answers ready=false, not an error, for a model that is unknown
// or not ready, as Triton does; only a malformed version is an error.
func (g *GRPCServer) ModelReady(ctx context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	v, err := parseModelVersion(req.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	return &pb.ModelReadyResponse{Ready: g.backend.ModelReady(ctx, req.GetName(), v) == nil}, nil
}

func (g *GRPCServer) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return g.metadata, nil
}

func (g *GRPCServer) ModelMetadata(ctx context.Context, req *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	v, err := parseModelVersion(req.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	md, err := g.backend.ModelMetadata(ctx, req.GetName(), v)
	if err != nil {
		return nil, grpcError(err)
	}
	return &pb.ModelMetadataResponse{
		Name:     md.Name,
		Versions: md.Versions,
		Platform: md.Platform,
		Inputs:   grpcTensorMetadata(md.Inputs),
		Outputs:  grpcTensorMetadata(md.Outputs),
	}, nil
}

func grpcTensorMetadata(ts []backendapi.TensorMetadata) []*pb.ModelMetadataResponse_TensorMetadata {
	out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(ts))
	for i, t := range ts {
		out[i] = &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.DataType.String(), Shape: t.Shape}
	}
	return out
}

func (g *GRPCServer) ModelConfig(ctx context.Context, req *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	v, err := parseModelVersion(req.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	cfg, err := g.backend.ModelConfig(ctx, req.GetName(), v)
	if err != nil {
		return nil, grpcError(err)
	}
	return &pb.ModelConfigResponse{Config: cfg}, nil
}

func (g *GRPCServer) ModelStatistics(ctx context.Context, req *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	v, err := parseModelVersion(req.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	stats, err := g.backend.ModelStatistics(ctx, req.GetName(), v)
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.ModelStatisticsResponse{ModelStats: make([]*pb.ModelStatistics, len(stats))}
	for i := range stats {
		out.ModelStats[i] = grpcModelStatistics(&stats[i])
	}
	return out, nil
}

func grpcDuration(d backendapi.Duration) *pb.StatisticDuration {
	return &pb.StatisticDuration{Count: d.Count, Ns: uint64(max(int64(d.Total), 0))}
}

func grpcModelStatistics(st *backendapi.ModelStatistics) *pb.ModelStatistics {
	var last uint64
	if !st.LastInference.IsZero() {
		last = uint64(max(st.LastInference.UnixMilli(), 0))
	}
	in := &st.Inference
	ms := &pb.ModelStatistics{
		Name:           st.Name,
		Version:        st.Version,
		LastInference:  last,
		InferenceCount: st.InferenceCount,
		ExecutionCount: st.ExecutionCount,
		InferenceStats: &pb.InferStatistics{
			Success:       grpcDuration(in.Success),
			Fail:          grpcDuration(in.Fail),
			Queue:         grpcDuration(in.Queue),
			ComputeInput:  grpcDuration(in.ComputeInput),
			ComputeInfer:  grpcDuration(in.ComputeInfer),
			ComputeOutput: grpcDuration(in.ComputeOutput),
			CacheHit:      grpcDuration(in.CacheHit),
			CacheMiss:     grpcDuration(in.CacheMiss),
		},
		ResponseStats: map[string]*pb.InferResponseStatistics{},
	}
	for _, b := range st.Batches {
		ms.BatchStats = append(ms.BatchStats, &pb.InferBatchStatistics{
			BatchSize:     b.BatchSize,
			ComputeInput:  grpcDuration(b.ComputeInput),
			ComputeInfer:  grpcDuration(b.ComputeInfer),
			ComputeOutput: grpcDuration(b.ComputeOutput),
		})
	}
	return ms
}
