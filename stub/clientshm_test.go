package stub

// aliasModel (decoupled) sends an empty response, waits until the request
// is cancelled (bounded), then copies IN0 to OUT0 and ends the request: a
// test can change the input in between and see whether the model read
// the client's memory or a copy of it.
type aliasModel struct{ noLifecycle }

func (aliasModel) Execute(reqs []*ModelRequest) []ModelResponse {
	for _, r := range reqs {
		if !holdUntilCancelled(r) {
			return nil
		}
		in, _ := r.Input("IN0")
		out, err := r.Output("OUT0", in.DataType, in.Shape)
		if err != nil {
			_ = r.Send(ModelResponse{Err: err}, true)
			continue
		}
		copy(out, in.Data)
		_ = r.Send(ModelResponse{}, true)
	}
	return nil
}

// sloppyModel ignores the error of Output and answers as if all went well.
type sloppyModel struct{ noLifecycle }

func (sloppyModel) Execute(reqs []*ModelRequest) []ModelResponse {
	for _, r := range reqs {
		in, _ := r.Input("IN0")
		if out, err := r.Output("OUT0", in.DataType, in.Shape); err == nil {
			copy(out, in.Data)
		}
	}
	return make([]ModelResponse, len(reqs))
}
