package server

import (
	"context"
	"encoding/base64"
	"net/http"
)

// cudaIPCHandleSize is sizeof(cudaIpcMemHandle_t).
const cudaIPCHandleSize = 64

type systemRegionJSON struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

type cudaRegionJSON struct {
	Name     string `json:"name"`
	DeviceID int64  `json:"device_id"`
	ByteSize uint64 `json:"byte_size"`
}

// shmMethodOK applies Triton's rule: status is GET, the others POST.
func shmMethodOK(w http.ResponseWriter, r *http.Request, action string) bool {
	if action == "status" {
		return allow(w, r, http.MethodGet)
	}
	return allow(w, r, http.MethodPost)
}

// shmExtension is what differs between the system and CUDA shared-memory
// endpoints; serveSharedMemory does the rest.
type shmExtension struct {
	kind       string // "system" or "cuda", for Triton's texts
	status     func(ctx context.Context, region string) (any, error)
	register   func(r *http.Request, region string, body jsonObject) error
	unregister func(ctx context.Context, region string) error
}

// serveSharedMemory serves {prefix}[/region/{r}]/{action} of one extension.
func (s *Server) serveSharedMemory(w http.ResponseWriter, r *http.Request, region, action string, ext shmExtension) {
	if !shmMethodOK(w, r, action) {
		return
	}
	ctx := r.Context()
	var err error
	switch action {
	case "status":
		var rows any
		if rows, err = ext.status(ctx, region); err == nil {
			writeJSON(w, rows)
			return
		}
	case "register":
		err = s.registerRegion(r, region, ext)
	case "unregister":
		err = ext.unregister(ctx, region)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header()[hdrContentType] = ctJSON
	w.WriteHeader(http.StatusOK)
}

// registerRegion reads a register request's JSON object and hands it to ext.
func (s *Server) registerRegion(r *http.Request, region string, ext shmExtension) error {
	if region == "" {
		return invalidArg("'region name' is necessary to register %s shared memory region", ext.kind)
	}
	body, err := readControlBody(r, s.maxInput)
	if err != nil {
		return err
	}
	obj, err := parseJSONObject(body, false)
	if err != nil {
		return err
	}
	return ext.register(r, region, obj)
}

// handleSystemSharedMemory serves /v2/systemsharedmemory[/region/{r}]/{action}.
func (s *Server) handleSystemSharedMemory(w http.ResponseWriter, r *http.Request, region, action string) {
	s.serveSharedMemory(w, r, region, action, shmExtension{
		kind: "system",
		status: func(ctx context.Context, region string) (any, error) {
			regions, err := s.backend.SystemSharedMemoryStatus(ctx, region)
			rows := make([]systemRegionJSON, len(regions))
			for i, g := range regions {
				rows[i] = systemRegionJSON(g)
			}
			return rows, err
		},
		register:   s.registerSystem,
		unregister: s.backend.UnregisterSystemSharedMemory,
	})
}

// handleCUDASharedMemory serves /v2/cudasharedmemory[/region/{r}]/{action}.
func (s *Server) handleCUDASharedMemory(w http.ResponseWriter, r *http.Request, region, action string) {
	s.serveSharedMemory(w, r, region, action, shmExtension{
		kind: "cuda",
		status: func(ctx context.Context, region string) (any, error) {
			regions, err := s.backend.CUDASharedMemoryStatus(ctx, region)
			rows := make([]cudaRegionJSON, len(regions))
			for i, g := range regions {
				rows[i] = cudaRegionJSON(g)
			}
			return rows, err
		},
		register:   s.registerCUDA,
		unregister: s.backend.UnregisterCUDASharedMemory,
	})
}

func (s *Server) registerSystem(r *http.Request, region string, obj jsonObject) error {
	raw, ok := obj["key"]
	if !ok {
		return invalidArg("Shared memory register request has no 'key' field")
	}
	key, err := rawString(raw)
	if err != nil {
		return err
	}
	var offset uint64
	if raw, ok := obj["offset"]; ok {
		if offset, err = rawUint(raw); err != nil {
			return err
		}
	}
	raw, ok = obj["byte_size"]
	if !ok {
		return invalidArg("Shared memory register request has no 'byte_size' field")
	}
	size, err := rawUint(raw)
	if err != nil {
		return err
	}
	return s.backend.RegisterSystemSharedMemory(r.Context(), region, key, offset, size)
}

func (s *Server) registerCUDA(r *http.Request, region string, obj jsonObject) error {
	raw, ok := obj["raw_handle"]
	if !ok {
		return invalidArg("Shared memory register request has no 'raw_handle' field")
	}
	handle, err := rawObject(raw)
	if err != nil {
		return err
	}
	raw, ok = handle["b64"]
	if !ok {
		return invalidArg("attempt to access non-existing object member 'b64'")
	}
	b64, err := rawString(raw)
	if err != nil {
		return err
	}
	var size, device uint64
	for _, m := range []struct {
		name string
		dst  *uint64
	}{{"byte_size", &size}, {"device_id", &device}} {
		raw, ok := obj[m.name]
		if !ok {
			return invalidArg("attempt to access non-existing object member '%s'", m.name)
		}
		if *m.dst, err = rawUint(raw); err != nil {
			return err
		}
	}
	decoded, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(decoded) != cudaIPCHandleSize {
		return invalidArg("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
	}
	if device > 1<<31 {
		return invalidArg("invalid 'device_id' %d", device)
	}
	return s.backend.RegisterCUDASharedMemory(r.Context(), region, decoded, int64(device), size)
}
