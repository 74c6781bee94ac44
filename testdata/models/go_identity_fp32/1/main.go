// Command go_identity_fp32 returns INPUT0 as OUTPUT0: the Go twin of
// identity_fp32, so the stub benchmark can compare the two runtimes.
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
		in, ok := r.Input("INPUT0")
		if !ok {
			resps[i].Err = backendapi.Errorf(backendapi.InvalidArg, "request has no input 'INPUT0'")
			continue
		}
		out, err := r.Output("OUTPUT0", in.DataType, in.Shape)
		if err != nil {
			resps[i].Err = err
			continue
		}
		copy(out, in.Data)
	}
	return resps
}

func main() { stub.Serve(model{}) }
