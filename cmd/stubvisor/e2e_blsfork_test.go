package main

// BLS from a process the model forks: testdata/models/bls_fork forks a
// multiprocessing child that calls add_sub with BLS. The child gets a clear
// Python exception (it must not touch the stub's rings and arenas, which it
// shares); the stub, its own BLS call and the other requests go on.

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

func TestBLSFromForkedChild(t *testing.T) {
	ipctest.RequirePython(t)
	s := startServer(t, copyRepo(t, "bls_fork", "add_sub"))
	before := oneStub(t, s, "bls_fork")
	call := func() (child, parent string, err string) {
		code, body := s.httpInferJSON("bls_fork", map[string]any{"inputs": []map[string]any{
			{"name": "INPUT0", "shape": []int{4}, "datatype": "FP32", "data": []float32{1, 2, 3, 4}}}})
		if code != 200 {
			return "", "", string(body)
		}
		var r httpResponse
		if e := json.Unmarshal(body, &r); e != nil {
			return "", "", e.Error()
		}
		var c []string
		_ = json.Unmarshal(r.output(t, "CHILD").Data, &c)
		if len(c) == 1 {
			child = c[0]
		}
		return child, httpCanonJSON(t, r.output(t, "PARENT").Data), ""
	}
	// Several requests at once, so that some are in flight on the stub
	// while a child tries its call.
	var wg sync.WaitGroup
	errs := make(chan string, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			child, parent, err := call()
			switch {
			case err != "":
				errs <- err
			case !strings.HasPrefix(child, "error TritonModelException: BLS is not supported in a process forked from the model's stub"):
				errs <- "child got " + child
			case parent != "[2,4,6,8]":
				errs <- "parent got " + parent
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	after := oneStub(t, s, "bls_fork")
	if after.PID != before.PID || after.Restarts != 0 {
		t.Errorf("the stub was replaced: before %+v, after %+v", before, after)
	}
	if !strings.Contains(s.Log(), "bls_fork: child running") {
		t.Errorf("the child's log line is lost:\n%s", s.Log())
	}
}
