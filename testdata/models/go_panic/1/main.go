// Command go_panic echoes IN0 into OUT0 and panics when IN0[0] == -1, to
// show that a crashing Go model takes down only its stub, which the
// supervisor restarts.
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
	resps := make([]stub.ModelResponse, len(reqs))
	for i, r := range reqs {
		in, ok := r.Input("IN0")
		if !ok || len(in.Data) < 4 {
			resps[i].Err = backendapi.Errorf(backendapi.InvalidArg, "request has no input 'IN0'")
			continue
		}
		if int32(binary.LittleEndian.Uint32(in.Data)) == -1 {
			panic("go_panic: IN0[0] == -1")
		}
		out, err := r.Output("OUT0", in.DataType, in.Shape)
		if err != nil {
			resps[i].Err = err
			continue
		}
		copy(out, in.Data)
	}
	return resps
}

func main() { stub.Serve(model{}) }
