// Package backendapi is the contract between the front ends (package
// server: HTTP, gRPC, metrics, the status page) and the core (package
// supervisor). The front ends know only this package; the core implements
// Backend. It holds the request and response types, the typed errors
// (Code, Errorf) that the front ends alone map to HTTP and gRPC statuses,
// tensor data types, model and stub states, and the generated Triton
// protos and model configuration (inferencepb, modelconfig).
//
// The API a Go model is written against is not here but in package stub,
// which uses this package's DataType and Errorf as its vocabulary.
//
// # Ownership across the contract
//
//   - Requests. The front end owns an InferRequest and every slice it
//     holds (input bytes, shapes, names), and may reuse them once Infer or
//     InferStream has returned. The backend reads them while the call
//     runs and copies what it sends to a stub (input bytes go into the
//     stub's shared memory), so it keeps nothing of the request after
//     returning, even when it returns because ctx ended: a caller that
//     gives up waits for a copy in progress to end, and an answer the stub
//     sends after that is dropped unread.
//   - Responses. The InferResponse that Infer returns belongs to the
//     caller until it calls Release: its output bytes may be a view of a
//     stub's shared memory, which goes back to the stub at Release, so
//     nothing may read them afterwards. A response passed to InferStream's
//     send is valid only during that call; the backend releases it.
//   - Shared memory. Client regions registered through the backend are
//     kept (by fd) until unregistered; a region in use by a request is
//     closed when its last request ends.
//   - Errors. Every error a Backend method returns carries a Code (built
//     with Errorf or wrapping one); its text is Triton's where Triton
//     defines one, and is shown to the client as is.
package backendapi
