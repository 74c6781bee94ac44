// Command go_repeat is a decoupled Go model: for IN = [v0 .. vn-1] it
// sends n responses (OUT = [vi], IDX = [i]) from a goroutine after Execute
// returned, then an empty final response. A cancelled request stops early.
package main

import (
	"encoding/binary"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/stub"
)

type model struct{}

func (model) Initialize(map[string]string) error { return nil }
func (model) Finalize() error                    { return nil }

func (model) Execute(reqs []*stub.ModelRequest) []stub.ModelResponse {
	for _, r := range reqs {
		go repeat(r)
	}
	return nil
}

// repeat answers one request; its input stays valid until the final
// response.
func repeat(r *stub.ModelRequest) {
	in, ok := r.Input("IN")
	if !ok {
		_ = r.Send(stub.ModelResponse{Err: backendapi.Errorf(backendapi.InvalidArg, "request has no input 'IN'")}, true)
		return
	}
	le := binary.LittleEndian
	for i := 0; i+4 <= len(in.Data); i += 4 {
		if r.Cancelled() {
			break
		}
		out, err := r.Output("OUT", backendapi.TypeInt32, []int64{1})
		if err == nil {
			copy(out, in.Data[i:i+4])
			var idx []byte
			if idx, err = r.Output("IDX", backendapi.TypeUint32, []int64{1}); err == nil {
				le.PutUint32(idx, uint32(i/4))
			}
		}
		if err != nil {
			_ = r.Send(stub.ModelResponse{Err: err}, true)
			return
		}
		if err := r.Send(stub.ModelResponse{}, false); err != nil {
			stub.Logf("ERROR", "go_repeat: send: %v", err)
			return
		}
	}
	_ = r.Send(stub.ModelResponse{}, true)
}

func main() { stub.Serve(model{}) }
