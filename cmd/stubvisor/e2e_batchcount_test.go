package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// TestRequestsPerExecute sends 64 requests without waiting on one gRPC
// stream to batch_count (max_batch_size 0, MAX_REQUESTS_PER_EXECUTE 8, an
// execute takes 5 ms) and to the same model without the parameter. With it,
// queued requests share execute calls (never more than 8); without it each
// call gets one. Either way every request gets its own answer, and the
// requests the model refuses get their error and nobody else's.
func TestRequestsPerExecute(t *testing.T) {
	ipctest.RequirePython(t)
	repo := copyRepo(t, "batch_count")
	cfg, err := os.ReadFile(filepath.Join(repo, "batch_count", "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	single := strings.Replace(string(cfg), `name: "batch_count"`, `name: "batch_count_single"`, 1)
	single = regexp.MustCompile(`(?m)^parameters.*\n`).ReplaceAllString(single, "")
	if err := os.CopyFS(filepath.Join(repo, "batch_count_single"), os.DirFS(filepath.Join(repo, "batch_count"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "batch_count_single", "config.pbtxt"), []byte(single), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, repo)
	_, c := grpcClient(t, s)
	refused := regexp.MustCompile(`request (\d+) refused`)
	tests := []struct {
		model    string
		maxCount uint32 // the most requests one execute may get
		merged   bool   // whether some execute must get more than one
	}{
		{"batch_count", 8, true},
		{"batch_count_single", 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			const n = 64
			st, err := c.ModelStreamInfer(callCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if err := st.Send(&pb.ModelInferRequest{ModelName: tc.model, Id: strconv.Itoa(i),
					Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "IDX", Datatype: "INT32", Shape: []int64{1}}},
					RawInputContents: [][]byte{ipctest.INT32(int32(i))}}); err != nil {
					t.Fatal(err)
				}
			}
			_ = st.CloseSend()
			seen := map[int]bool{}
			var most uint32
			recvEach(t, st, func(m *pb.ModelStreamInferResponse) bool {
				idx := -1
				if m.ErrorMessage != "" {
					sub := refused.FindStringSubmatch(m.ErrorMessage)
					if sub == nil {
						t.Fatalf("unexpected error: %s", m.ErrorMessage)
					}
					idx, _ = strconv.Atoi(sub[1])
					if idx%10 != 7 {
						t.Errorf("request %d was refused; only IDX ending in 7 are", idx)
					}
				} else {
					r := m.InferResponse
					idx, err = strconv.Atoi(r.Id)
					if err != nil {
						t.Fatalf("response id %q", r.Id)
					}
					_, out := outputByName(t, r, "IDX_OUT")
					if got := int(int32(binary.LittleEndian.Uint32(out))); got != idx {
						t.Errorf("request %d got the answer of request %d", idx, got)
					}
					if idx%10 == 7 {
						t.Errorf("request %d should have been refused", idx)
					}
					_, count := outputByName(t, r, "COUNT")
					most = max(most, binary.LittleEndian.Uint32(count))
				}
				if seen[idx] {
					t.Errorf("request %d answered twice", idx)
				}
				seen[idx] = true
				return true
			})
			if len(seen) != n {
				t.Fatalf("%d requests answered, want %d", len(seen), n)
			}
			if most > tc.maxCount {
				t.Errorf("an execute got %d requests, at most %d allowed", most, tc.maxCount)
			}
			if tc.merged && most < 2 {
				t.Errorf("no two of %d queued requests shared an execute", n)
			}
		})
	}
}
