// Command go_minimal is Triton's minimal backend written as a Go-native
// model: OUT0 is a copy of IN0 (INT32, shape [4]).
package main

import (
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
		if !ok {
			resps[i].Err = backendapi.Errorf(backendapi.InvalidArg, "request has no input 'IN0'")
			continue
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
