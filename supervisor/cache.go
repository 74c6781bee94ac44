package supervisor

import (
	"context"
	"errors"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/supervisor/clientshm"
	"github.com/stubvisor/stubvisor/supervisor/respcache"
)

// The response cache (package respcache) in the request path: a model
// whose config enables response_cache, on a server started with a cache
// (--cache-config local,size=N), answers a request it has answered before
// from the cache, without reaching a stub. Decoupled models and the
// sequence batcher refuse response_cache at load, with Triton's texts
// (modelconfig.Validate).

// errCUDAInput keeps requests with inputs in CUDA shared memory out of the
// cache: their bytes are on a device the supervisor does not read.
var errCUDAInput = errors.New("input in CUDA shared memory")

// cacheKey returns the cache key of req on mv, or false when the response
// is not to be cached: no cache, the model does not enable it, an output
// is to be written into client shared memory (the cache keeps responses,
// not the client's memory), or an input is in CUDA shared memory.
func (s *Supervisor) cacheKey(mv *modelVersion, req *backendapi.InferRequest) (respcache.Key, bool) {
	if s.cache == nil || !mv.cfg.GetResponseCache().GetEnable() {
		return respcache.Key{}, false
	}
	for _, o := range req.Outputs {
		if o.SharedMemory != nil {
			return respcache.Key{}, false
		}
	}
	key, err := respcache.KeyOf(req, mv.version, s.shmBytes)
	return key, err == nil
}

// shmBytes reads an input held in a registered system shared-memory
// region, for the cache key.
func (s *Supervisor) shmBytes(in *backendapi.InputTensor) ([]byte, error) {
	r, err := s.shm.Acquire(in.SharedMemory)
	if err != nil {
		return nil, err
	}
	defer s.shm.Release([]*clientshm.Region{r})
	if _, _, cuda := r.CUDA(); cuda || r.FD() == nil {
		return nil, errCUDAInput
	}
	off, _ := r.Window()
	buf := make([]byte, in.SharedMemory.ByteSize)
	if _, err := r.FD().ReadAt(buf, int64(off+in.SharedMemory.Offset)); err != nil {
		return nil, err
	}
	return buf, nil
}

// inferCached is Infer for a model version whose responses may be
// cached: a hit is answered here and counted as a successful request (no
// execution), a miss runs the model and keeps its response.
func (s *Supervisor) inferCached(ctx context.Context, mv *modelVersion, req *backendapi.InferRequest, key respcache.Key) (*backendapi.InferResponse, error) {
	start := time.Now()
	if _, err := mv.sig.Validate(req); err != nil {
		return nil, err
	}
	if resp, hit := s.cache.Lookup(mv.name, mv.version, key); hit {
		resp.ID, resp.ModelName, resp.ModelVersion = req.ID, mv.name, mv.version
		mv.stats.cacheHit(time.Since(start))
		return resp, nil
	}
	pr, err := mv.submit(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	pr.NotifyQueued()
	resp, err := pr.Wait()
	if err == nil {
		s.cache.Insert(mv.name, mv.version, key, resp)
	}
	return resp, err
}

// cacheStats adds the cache's counts of a model version to its statistics.
func (s *Supervisor) cacheStats(st *backendapi.ModelStatistics, mv *modelVersion) {
	if s.cache == nil {
		return
	}
	ms := s.cache.ModelStats(mv.name, mv.version)
	st.Inference.CacheHit = backendapi.Duration{Count: ms.Hits, Total: ms.HitTime}
	st.Inference.CacheMiss = backendapi.Duration{Count: ms.Misses, Total: ms.MissTime}
}
