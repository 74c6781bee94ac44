// Command go_cancel_watch is the Go twin of the cancel_watch model: Execute
// polls ModelRequest.Cancelled every 10 ms for at most WAIT_MS
// milliseconds; a cancelled request is logged ("go_cancel_watch: request
// '<id>' cancelled") and answered with a Cancelled error, any other with
// TICKS, the number of polls.
package main

import (
	"encoding/binary"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/stub"
)

type model struct{}

func (model) Initialize(map[string]string) error { return nil }
func (model) Finalize() error                    { return nil }

func (model) Execute(reqs []*stub.ModelRequest) []stub.ModelResponse {
	out := make([]stub.ModelResponse, len(reqs))
	for i, r := range reqs {
		out[i] = watch(r)
	}
	return out
}

func watch(r *stub.ModelRequest) stub.ModelResponse {
	in, ok := r.Input("WAIT_MS")
	if !ok || len(in.Data) != 4 {
		return stub.ModelResponse{Err: backendapi.Errorf(backendapi.InvalidArg, "request needs WAIT_MS")}
	}
	stub.Logf("INFO", "go_cancel_watch: request '%s' running", r.ID)
	deadline := time.Now().Add(time.Duration(binary.LittleEndian.Uint32(in.Data)) * time.Millisecond)
	ticks := int32(0)
	for time.Now().Before(deadline) {
		if r.Cancelled() {
			stub.Logf("INFO", "go_cancel_watch: request '%s' cancelled", r.ID)
			return stub.ModelResponse{Err: backendapi.Errorf(backendapi.Cancelled, "request cancelled")}
		}
		time.Sleep(10 * time.Millisecond) // the model's own pace, not a synchronisation
		ticks++
	}
	buf, err := r.Output("TICKS", backendapi.TypeInt32, []int64{1})
	if err != nil {
		return stub.ModelResponse{Err: err}
	}
	binary.LittleEndian.PutUint32(buf, uint32(ticks))
	return stub.ModelResponse{}
}

func main() { stub.Serve(model{}) }
