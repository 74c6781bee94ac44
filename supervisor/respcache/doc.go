// Package respcache is the response cache: finished responses of models
// whose config enables response_cache, looked up by a key over everything
// that decides a response, so that a repeated request is answered without
// reaching a stub.
//
// The key (KeyOf) covers, as Triton's does, the model name and version and
// every input's name, data type, shape and bytes (an input held in client
// shared memory is read through the Source the caller gives), and the
// request's parameters. It also covers the requested outputs' names, which
// Triton leaves out: a hit then never serves a response with other outputs
// than the request asked for.
//
// The Cache keeps entries in least-recently-used order within a byte
// limit (--cache-config local,size=N): an insertion that does not fit
// evicts the oldest entries; a response larger than the whole limit is not
// kept. It counts hits and misses per model with their durations (the
// statistics extension's cache_hit and cache_miss) and the totals behind
// the nv_cache_* metrics.
//
// # Files
//
//	doc.go    this description
//	key.go    KeyOf: the key of a request
//	cache.go  Cache: the LRU, its limit and its counts
//
// # Lock order
//
// Cache.mu is the only lock; nothing is called while it is held.
package respcache
