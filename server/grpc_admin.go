package server

import (
	"context"
	"strings"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// This file holds the gRPC control RPCs: repository, shared memory,
// logging and trace settings. Each decodes its typed request, calls the
// backend and maps errors with grpcError, with Triton's gRPC texts where
// they differ from its HTTP ones (typed parameters instead of JSON).

func (g *GRPCServer) RepositoryIndex(ctx context.Context, req *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	index, err := g.backend.RepositoryIndex(ctx, req.GetReady())
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.RepositoryIndexResponse{Models: make([]*pb.RepositoryIndexResponse_ModelIndex, len(index))}
	for i, e := range index {
		out.Models[i] = &pb.RepositoryIndexResponse_ModelIndex{Name: e.Name, Version: e.Version, State: string(e.State), Reason: e.Reason}
	}
	return out, nil
}

// RepositoryModelLoad loads a model; "config" must be a string_param and
// "file:<version>/<path>" a bytes_param, as tritonclient sends them.
func (g *GRPCServer) RepositoryModelLoad(ctx context.Context, req *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	if req.GetRepositoryName() != "" {
		return nil, grpcError(backendapi.Errorf(backendapi.Unsupported, "%s", msgRepositoryName))
	}
	var opts backendapi.LoadOptions
	for key, p := range req.GetParameters() {
		switch {
		case key == "config":
			v, ok := p.GetParameterChoice().(*pb.ModelRepositoryParameter_StringParam)
			if !ok {
				return nil, grpcError(invalidArg("invalid value type for load parameter '%s', expected string_param.", key))
			}
			opts.ConfigJSON = v.StringParam
		case strings.HasPrefix(key, "file:"):
			v, ok := p.GetParameterChoice().(*pb.ModelRepositoryParameter_BytesParam)
			if !ok {
				return nil, grpcError(invalidArg("invalid value type for load parameter '%s', expected bytes_param.", key))
			}
			if opts.Files == nil {
				opts.Files = make(map[string][]byte)
			}
			opts.Files[key] = v.BytesParam
		}
	}
	if err := g.backend.LoadModel(ctx, req.GetModelName(), opts); err != nil {
		return nil, grpcError(err)
	}
	return &pb.RepositoryModelLoadResponse{}, nil
}

func (g *GRPCServer) RepositoryModelUnload(ctx context.Context, req *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	if req.GetRepositoryName() != "" {
		return nil, grpcError(backendapi.Errorf(backendapi.Unsupported, "%s", msgRepositoryName))
	}
	dependents := false
	if p, ok := req.GetParameters()["unload_dependents"]; ok {
		v, ok := p.GetParameterChoice().(*pb.ModelRepositoryParameter_BoolParam)
		if !ok {
			return nil, grpcError(invalidArg("invalid value type for unload parameter 'unload_dependents', expected bool_param."))
		}
		dependents = v.BoolParam
	}
	if err := g.backend.UnloadModel(ctx, req.GetModelName(), dependents); err != nil {
		return nil, grpcError(err)
	}
	return &pb.RepositoryModelUnloadResponse{}, nil
}

func (g *GRPCServer) SystemSharedMemoryStatus(ctx context.Context, req *pb.SystemSharedMemoryStatusRequest) (*pb.SystemSharedMemoryStatusResponse, error) {
	regions, err := g.backend.SystemSharedMemoryStatus(ctx, req.GetName())
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.SystemSharedMemoryStatusResponse{Regions: make(map[string]*pb.SystemSharedMemoryStatusResponse_RegionStatus, len(regions))}
	for _, r := range regions {
		out.Regions[r.Name] = &pb.SystemSharedMemoryStatusResponse_RegionStatus{Name: r.Name, Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize}
	}
	return out, nil
}

// SystemSharedMemoryRegister and CudaSharedMemoryRegister take the region
// name as sent: Triton's gRPC front end, unlike its HTTP one, does not
// require one, and an invalid CUDA handle gets the registry's "invalid
// args" answer whatever the name.
func (g *GRPCServer) SystemSharedMemoryRegister(ctx context.Context, req *pb.SystemSharedMemoryRegisterRequest) (*pb.SystemSharedMemoryRegisterResponse, error) {
	if err := g.backend.RegisterSystemSharedMemory(ctx, req.GetName(), req.GetKey(), req.GetOffset(), req.GetByteSize()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.SystemSharedMemoryRegisterResponse{}, nil
}

func (g *GRPCServer) SystemSharedMemoryUnregister(ctx context.Context, req *pb.SystemSharedMemoryUnregisterRequest) (*pb.SystemSharedMemoryUnregisterResponse, error) {
	if err := g.backend.UnregisterSystemSharedMemory(ctx, req.GetName()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.SystemSharedMemoryUnregisterResponse{}, nil
}

func (g *GRPCServer) CudaSharedMemoryStatus(ctx context.Context, req *pb.CudaSharedMemoryStatusRequest) (*pb.CudaSharedMemoryStatusResponse, error) {
	regions, err := g.backend.CUDASharedMemoryStatus(ctx, req.GetName())
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.CudaSharedMemoryStatusResponse{Regions: make(map[string]*pb.CudaSharedMemoryStatusResponse_RegionStatus, len(regions))}
	for _, r := range regions {
		out.Regions[r.Name] = &pb.CudaSharedMemoryStatusResponse_RegionStatus{Name: r.Name, DeviceId: uint64(max(r.DeviceID, 0)), ByteSize: r.ByteSize}
	}
	return out, nil
}

func (g *GRPCServer) CudaSharedMemoryRegister(ctx context.Context, req *pb.CudaSharedMemoryRegisterRequest) (*pb.CudaSharedMemoryRegisterResponse, error) {
	if err := g.backend.RegisterCUDASharedMemory(ctx, req.GetName(), req.GetRawHandle(), req.GetDeviceId(), req.GetByteSize()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.CudaSharedMemoryRegisterResponse{}, nil
}

func (g *GRPCServer) CudaSharedMemoryUnregister(ctx context.Context, req *pb.CudaSharedMemoryUnregisterRequest) (*pb.CudaSharedMemoryUnregisterResponse, error) {
	if err := g.backend.UnregisterCUDASharedMemory(ctx, req.GetName()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.CudaSharedMemoryUnregisterResponse{}, nil
}

// LogSettings reads and updates the logging extension's settings, shared
// with the HTTP front end when GRPCOptions.HTTP is set. The rules are the
// HTTP ones: every setting is checked before any is applied, log_file
// cannot be set, log_format is "default" or "ISO8601". The reply always
// carries all six keys.
func (g *GRPCServer) LogSettings(_ context.Context, req *pb.LogSettingsRequest) (*pb.LogSettingsResponse, error) {
	ls := g.logging
	settings := req.GetSettings()
	if p, ok := settings["log_file"]; ok && p.GetParameterChoice() != nil {
		return nil, grpcError(backendapi.Errorf(backendapi.Unsupported, "log file location can not be updated through network protocol"))
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	next := ls.logState
	for _, b := range []struct {
		key string
		dst *bool
	}{{"log_info", &next.info}, {"log_warning", &next.warning}, {"log_error", &next.error}} {
		p, ok := settings[b.key]
		if !ok || p.GetParameterChoice() == nil {
			continue
		}
		v, ok := p.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_BoolParam)
		if !ok {
			return nil, grpcError(invalidArg("expect bool_param for '%s'", b.key))
		}
		*b.dst = v.BoolParam
	}
	if p, ok := settings["log_verbose_level"]; ok && p.GetParameterChoice() != nil {
		v, ok := p.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_Uint32Param)
		if !ok {
			return nil, grpcError(invalidArg("expect uint32_param for 'log_verbose_level'"))
		}
		next.verbose = uint64(v.Uint32Param)
	}
	if p, ok := settings["log_format"]; ok && p.GetParameterChoice() != nil {
		v, ok := p.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_StringParam)
		if !ok {
			return nil, grpcError(invalidArg("expect string_param for 'log_format'"))
		}
		if v.StringParam != logFormatDefault && v.StringParam != logFormatISO8601 {
			return nil, grpcError(backendapi.Errorf(backendapi.Unavailable, "invalid argument for --log_format, got: %s", v.StringParam))
		}
		next.format = v.StringParam
	}
	if next != ls.logState {
		ls.logState = next
		ls.logger.SetLevel(ls.level())
	}
	snap := ls.snapshot()
	boolean := func(b bool) *pb.LogSettingsResponse_SettingValue {
		return &pb.LogSettingsResponse_SettingValue{ParameterChoice: &pb.LogSettingsResponse_SettingValue_BoolParam{BoolParam: b}}
	}
	str := func(s string) *pb.LogSettingsResponse_SettingValue {
		return &pb.LogSettingsResponse_SettingValue{ParameterChoice: &pb.LogSettingsResponse_SettingValue_StringParam{StringParam: s}}
	}
	return &pb.LogSettingsResponse{Settings: map[string]*pb.LogSettingsResponse_SettingValue{
		"log_file":    str(snap.LogFile),
		"log_info":    boolean(snap.LogInfo),
		"log_warning": boolean(snap.LogWarning),
		"log_error":   boolean(snap.LogError),
		"log_verbose_level": {ParameterChoice: &pb.LogSettingsResponse_SettingValue_Uint32Param{
			Uint32Param: uint32(min(snap.LogVerboseLevel, 1<<32-1)),
		}},
		"log_format": str(snap.LogFormat),
	}}, nil
}
