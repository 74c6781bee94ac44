package respcache

import (
	"container/list"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
)

// entryOverhead is what an entry costs besides its tensors' bytes (the
// key, the list element, the map slot), counted against the limit so
// that many small responses cannot grow the cache without bound.
const entryOverhead = 256

// ModelStats are one model version's cache counts: the statistics
// extension's cache_hit and cache_miss. A miss's duration is its lookup
// and, when its response was then inserted, the insertion.
type ModelStats struct {
	Hits, Misses      uint64
	HitTime, MissTime time.Duration
}

// Stats are the cache's totals (the nv_cache_* metrics).
type Stats struct {
	Entries      int
	Bytes, Limit uint64
	Lookups      uint64
	Hits, Misses uint64
	Evictions    uint64
	LookupTime   time.Duration
	InsertTime   time.Duration
}

// Util is the part of the limit in use, 0 to 1 (nv_cache_util).
func (s Stats) Util() float64 {
	if s.Limit == 0 {
		return 0
	}
	return float64(s.Bytes) / float64(s.Limit)
}

type modelKey struct {
	name    string
	version int64
}

type entry struct {
	key   Key
	resp  *backendapi.InferResponse
	bytes uint64
}

// Cache is a byte-bounded LRU of responses, safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	limit   uint64
	used    uint64
	lru     list.List // front: most recently used *entry
	entries map[Key]*list.Element
	models  map[modelKey]*ModelStats
	totals  Stats
}

// New returns a cache holding at most limit bytes of responses.
func New(limit uint64) *Cache {
	return &Cache{limit: limit, entries: map[Key]*list.Element{}, models: map[modelKey]*ModelStats{}}
}

// Lookup returns the cached response of key, counted as a hit or a miss of
// the model version. The response is shared: callers may set its ID and
// read its outputs, and must not change its tensors.
func (c *Cache) Lookup(model string, version int64, key Key) (*backendapi.InferResponse, bool) {
	start := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	var resp *backendapi.InferResponse
	if ok {
		c.lru.MoveToFront(el)
		resp = copyHeader(el.Value.(*entry).resp)
	}
	d := time.Since(start)
	ms := c.model(model, version)
	c.totals.Lookups++
	c.totals.LookupTime += d
	if ok {
		c.totals.Hits++
		ms.Hits++
		ms.HitTime += d
	} else {
		c.totals.Misses++
		ms.Misses++
		ms.MissTime += d
	}
	return resp, ok
}

// Insert keeps a copy of resp under key, evicting the least recently used
// entries to make room; it reports whether the response was kept. One
// larger than the limit is not, nor one with an output written into client
// shared memory (its bytes are the client's, not the response's). Its
// duration is added to the model's miss time.
func (c *Cache) Insert(model string, version int64, key Key, resp *backendapi.InferResponse) bool {
	start := time.Now()
	for _, o := range resp.Outputs {
		if o.SharedMemory != nil {
			return false
		}
	}
	e := &entry{key: key, resp: deepCopy(resp)}
	e.bytes = entryOverhead + size(e.resp)
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		d := time.Since(start)
		c.totals.InsertTime += d
		c.model(model, version).MissTime += d
	}()
	if e.bytes > c.limit {
		return false
	}
	if old, ok := c.entries[key]; ok {
		c.remove(old)
	}
	for c.used+e.bytes > c.limit {
		c.remove(c.lru.Back())
		c.totals.Evictions++
	}
	c.entries[key] = c.lru.PushFront(e)
	c.used += e.bytes
	return true
}

// ModelStats returns the counts of one model version.
func (c *Cache) ModelStats(model string, version int64) ModelStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ms := c.models[modelKey{model, version}]; ms != nil {
		return *ms
	}
	return ModelStats{}
}

// Stats returns the totals.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.totals
	s.Entries, s.Bytes, s.Limit = len(c.entries), c.used, c.limit
	return s
}

func (c *Cache) model(name string, version int64) *ModelStats {
	k := modelKey{name, version}
	ms := c.models[k]
	if ms == nil {
		ms = &ModelStats{}
		c.models[k] = ms
	}
	return ms
}

func (c *Cache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*entry)
	delete(c.entries, e.key)
	c.used -= e.bytes
}

// copyHeader is a response that shares r's tensors and parameters.
func copyHeader(r *backendapi.InferResponse) *backendapi.InferResponse {
	return &backendapi.InferResponse{ModelName: r.ModelName, ModelVersion: r.ModelVersion, ID: r.ID,
		Parameters: r.Parameters, Outputs: r.Outputs}
}

// deepCopy copies a response out of the memory it aliases (a stub's
// arena).
func deepCopy(r *backendapi.InferResponse) *backendapi.InferResponse {
	out := copyHeader(r)
	out.ID = ""
	if len(r.Parameters) > 0 {
		out.Parameters = make(map[string]any, len(r.Parameters))
		for k, v := range r.Parameters {
			out.Parameters[k] = v
		}
	}
	out.Outputs = make([]backendapi.OutputTensor, len(r.Outputs))
	for i, o := range r.Outputs {
		out.Outputs[i] = backendapi.OutputTensor{Name: o.Name, DataType: o.DataType,
			Shape: append([]int64(nil), o.Shape...), Data: append([]byte(nil), o.Data...)}
	}
	return out
}

func size(r *backendapi.InferResponse) uint64 {
	n := uint64(0)
	for _, o := range r.Outputs {
		n += uint64(len(o.Name)+len(o.Data)) + 8*uint64(len(o.Shape))
	}
	for k, v := range r.Parameters {
		n += uint64(len(k)) + 16
		if s, ok := v.(string); ok {
			n += uint64(len(s))
		}
	}
	return n
}
