// Package modelconfig reads, completes, checks and prints model
// configurations (inferencepb.ModelConfig) the way Triton does, so that a
// model repository written for Triton's Python backend works unchanged:
//
//   - Parse reads config.pbtxt (protobuf text format, with Triton's habits:
//     repeated `input [ ... ]` blocks that merge, comments, no name).
//   - FromJSON reads the JSON form a repository load request carries
//     (case-insensitive enum names, unknown fields rejected).
//   - ToJSON prints the JSON form that GET /v2/models/{m}/config returns and
//     that a Python model receives as args["model_config"].
//   - Normalize fills in the defaults Triton applies; Validate rejects what
//     Triton rejects, with Triton's messages.
//   - ScanRepository and Versions find model and version directories.
//   - Metadata derives the KServe model metadata.
//
// Errors are client-facing: each carries a backendapi.Code (see
// backendapi.CodeOf) and Triton-like text naming the file, line or field,
// and matches one of the sentinels below under errors.Is.
//
// The package does no logging and keeps no state; everything here is safe
// for concurrent use on distinct configs.
package modelconfig
