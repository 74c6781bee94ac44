package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcMethodGroups are the restricted API groups
// (--grpc-restricted-protocol) of every RPC the gRPC front end serves,
// by full method name. Triton's (grpc_server.cc) for its service and the
// standard health service; server reflection, which Triton does not
// serve, describes the API and so is metadata. NewGRPC refuses to build a
// server with an RPC missing here, so that a new RPC cannot go unguarded.
var grpcMethodGroups = map[string]APIGroup{
	"/inference.GRPCInferenceService/ServerLive":                     GroupHealth,
	"/inference.GRPCInferenceService/ServerReady":                    GroupHealth,
	"/inference.GRPCInferenceService/ModelReady":                     GroupHealth,
	"/inference.GRPCInferenceService/ServerMetadata":                 GroupMetadata,
	"/inference.GRPCInferenceService/ModelMetadata":                  GroupMetadata,
	"/inference.GRPCInferenceService/ModelInfer":                     GroupInference,
	"/inference.GRPCInferenceService/ModelStreamInfer":               GroupInference,
	"/inference.GRPCInferenceService/ModelConfig":                    GroupModelConfig,
	"/inference.GRPCInferenceService/ModelStatistics":                GroupStatistics,
	"/inference.GRPCInferenceService/RepositoryIndex":                GroupModelRepository,
	"/inference.GRPCInferenceService/RepositoryModelLoad":            GroupModelRepository,
	"/inference.GRPCInferenceService/RepositoryModelUnload":          GroupModelRepository,
	"/inference.GRPCInferenceService/SystemSharedMemoryStatus":       GroupSharedMemory,
	"/inference.GRPCInferenceService/SystemSharedMemoryRegister":     GroupSharedMemory,
	"/inference.GRPCInferenceService/SystemSharedMemoryUnregister":   GroupSharedMemory,
	"/inference.GRPCInferenceService/CudaSharedMemoryStatus":         GroupSharedMemory,
	"/inference.GRPCInferenceService/CudaSharedMemoryRegister":       GroupSharedMemory,
	"/inference.GRPCInferenceService/CudaSharedMemoryUnregister":     GroupSharedMemory,
	"/inference.GRPCInferenceService/TraceSetting":                   GroupTrace,
	"/inference.GRPCInferenceService/LogSettings":                    GroupLogging,
	"/grpc.health.v1.Health/Check":                                   GroupHealth,
	"/grpc.health.v1.Health/Watch":                                   GroupHealth,
	"/grpc.health.v1.Health/List":                                    GroupHealth,
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      GroupMetadata,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": GroupMetadata,
}

// grpcRestrictor applies Restrictions to every RPC, unary and streaming.
type grpcRestrictor struct{ r *Restrictions }

// refusal returns the error an RPC is refused with, or nil. An RPC in no
// group is refused while anything is restricted (a service registered
// later through GRPC() is not known to be safe).
func (g grpcRestrictor) refusal(ctx context.Context, method string) error {
	if g.r.Empty() {
		return nil
	}
	grp, ok := grpcMethodGroups[method]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "RPC %s is in no restricted API group", method)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return g.r.grpcRefusal(grp, func(key string) string {
		if v := md.Get(key); len(v) > 0 {
			return v[0]
		}
		return ""
	})
}

func (g grpcRestrictor) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := g.refusal(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (g grpcRestrictor) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := g.refusal(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// checkGroups fails unless every RPC that srv serves has a group.
func checkGroups(srv *grpc.Server) error {
	for svc, info := range srv.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			if _, ok := grpcMethodGroups[full]; !ok {
				return fmt.Errorf("server: new grpc: RPC %s is in no restricted API group", full)
			}
		}
	}
	return nil
}
