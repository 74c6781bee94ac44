// Package inferencepb holds the Go code generated from backendapi/proto:
// the model configuration schema (ModelConfig and friends, proto package
// "inference") and the KServe v2 / Triton GRPCInferenceService.
//
// Do not edit the .pb.go files; change the .proto sources and run
// `make proto`. Package modelconfig reads and writes these messages in
// Triton's text and JSON forms.
package inferencepb
