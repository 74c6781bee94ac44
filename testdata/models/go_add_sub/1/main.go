// Command go_add_sub is testdata's add_sub model written as a Go-native
// model: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, per
// request of a batch.
package main

import (
	"encoding/binary"
	"math"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/stub"
)

type model struct{}

func (model) Initialize(map[string]string) error { return nil }
func (model) Finalize() error                    { return nil }

func (model) Execute(reqs []*stub.ModelRequest) []stub.ModelResponse {
	resps := make([]stub.ModelResponse, len(reqs))
	for i, r := range reqs {
		resps[i].Err = addSub(r)
	}
	return resps
}

func addSub(r *stub.ModelRequest) error {
	a, okA := r.Input("INPUT0")
	b, okB := r.Input("INPUT1")
	if !okA || !okB || len(a.Data) != len(b.Data) {
		return backendapi.Errorf(backendapi.InvalidArg, "add_sub needs INPUT0 and INPUT1 of one shape")
	}
	sum, err := r.Output("OUTPUT0", a.DataType, a.Shape)
	if err != nil {
		return err
	}
	diff, err := r.Output("OUTPUT1", a.DataType, a.Shape)
	if err != nil {
		return err
	}
	for k := 0; k+4 <= len(a.Data); k += 4 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(a.Data[k:]))
		y := math.Float32frombits(binary.LittleEndian.Uint32(b.Data[k:]))
		binary.LittleEndian.PutUint32(sum[k:], math.Float32bits(x+y))
		binary.LittleEndian.PutUint32(diff[k:], math.Float32bits(x-y))
	}
	return nil
}

func main() { stub.Serve(model{}) }
