// Package server is stubvisor's network front end: the KServe v2 HTTP/REST
// API with Triton's extensions (binary tensors, shared memory, sequences,
// statistics, repository, logging, generate, trace), the Prometheus metrics
// handler and the stub status page.
//
// It depends only on backendapi: every request is turned into a call on a
// backendapi.Backend, and every error the backend returns is mapped to a
// status here and nowhere else. The wire-independent pieces (request
// parameter handling, error-to-status mapping, datatype and JSON tensor
// conversion) live in their own files so that the gRPC front end can share
// them.
//
// Restricted API groups (--http-restricted-api, --grpc-restricted-protocol)
// are decided in one place, restrict.go, for both front ends: HTTP at route
// dispatch, gRPC in interceptors (restrict_grpc.go), every route and RPC
// in a group.
//
// The infer path is written for throughput: the JSON header of an infer
// request is decoded by a small purpose-built scanner straight into
// little-endian tensor bytes, binary tensors alias the request body,
// per-request buffers are pooled, and binary outputs are written straight
// from the response's Data (which aliases stub memory) before the response is
// released.
package server
