// Command go_sender_once is the Go twin of the sender_once model: a model
// that is not decoupled sets ModelRequest.SendLater and answers through
// Send. The request parameter "mode" says when: "during" (inside Execute)
// or "after" (from a goroutine, once Execute has returned). OUT is 1.
package main

import (
	"encoding/binary"
	"encoding/json"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/stub"
)

type model struct{}

func (model) Initialize(map[string]string) error { return nil }
func (model) Finalize() error                    { return nil }

func (model) Execute(reqs []*stub.ModelRequest) []stub.ModelResponse {
	returned := make(chan struct{})
	defer close(returned)
	for _, r := range reqs {
		var p struct {
			Mode string `json:"mode"`
		}
		_ = json.Unmarshal([]byte(r.Parameters), &p)
		r.SendLater = true
		if p.Mode == "after" {
			go answer(r, returned)
		} else {
			answer(r, nil)
		}
	}
	return make([]stub.ModelResponse, len(reqs))
}

// answer sends the request's one response once after is closed (at once
// when it is nil).
func answer(r *stub.ModelRequest, after <-chan struct{}) {
	if after != nil {
		<-after
	}
	resp := stub.ModelResponse{}
	if buf, err := r.Output("OUT", backendapi.TypeInt32, []int64{1}); err != nil {
		resp.Err = err
	} else {
		binary.LittleEndian.PutUint32(buf, 1)
	}
	if err := r.Send(resp, true); err != nil {
		stub.Logf("ERROR", "go_sender_once: %v", err)
	}
}

func main() { stub.Serve(model{}) }
