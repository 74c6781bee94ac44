package python

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// harnessScript drives python/tests/stubharness.py, the fake supervisor of
// the Python unit tests (which run without Go), with a recording region in
// place of a stub: it prints, one hex line each, the messages the harness
// builds (Initialize, Execute, Release, Finalize), reading the Release's
// offsets and an inline output from the Go-encoded ExecuteDone on stdin,
// then the inline output's values and the harness's numpy type of each
// data type number as JSON.
const harnessScript = `
import json, sys
import numpy as np
import stubharness as h
from stubvisor import ipc

class Region:
    def __init__(self):
        self.sent, self.mem = [], {}
    def send(self, msg):
        self.sent.append(msg)
    def alloc(self, n):
        off = 64 * (len(self.mem) + 1)
        self.mem[off] = bytearray(n)
        return off
    def view(self, loc, off, n):
        assert loc == ipc.LOC_ARENA0, loc
        return self.mem[off]

class Exited:
    def wait(self, timeout=None):
        return 0

st = h.Stub.__new__(h.Stub)
st.sup, st.proc, st.instance, st.next_id, st.logs = Region(), Exited(), "m_0_0", 100, []
st.expect = lambda kind, timeout=None: [kind, st.next_id, None, None]
st.initialize("/models/m", config={"max_batch_size": 4}, decoupled=True)
st.execute([st.request(7, [st.tensor("IN", 8, np.array([1, 2], np.int32)), st.tensor("S", 13, [b"ab"])],
                       requested=["OUT"], params={"a": 1}, correlation_id=5, request_id="r", flags=2)], batch_id=9)
done = ipc.msgpack.unpackb(bytes.fromhex(sys.stdin.read().strip()), raw=False, strict_map_key=False)
resp = done[3][0]
st.release(resp)
st.finalize()
packer = ipc.msgpack.Packer(use_bin_type=True, autoreset=True)
for m in st.sup.sent:
    print(packer.pack(m).hex())
print(json.dumps({t[0]: st.read(t).tolist() for t in resp[3] if t[3] == ipc.LOC_INLINE}))
print(json.dumps({k: np.dtype(v).name for k, v in h.NP.items()}))
`

// TestStubHarnessSpeaksGoMessages checks that the Python unit tests' fake
// supervisor builds and reads messages as the Go message table lays them
// out: the constants are checked by ipc's drift test, the positions of
// fields here.
func TestStubHarnessSpeaksGoMessages(t *testing.T) {
	ipctest.RequirePython(t)
	enc := ipc.NewEncoder()
	frame := func(m ipc.Message) []byte {
		t.Helper()
		b, err := enc.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(b)
	}
	done := frame(&ipc.ExecuteDoneMsg{BatchID: 9, Responses: []ipc.Response{{Handle: 7, Flags: ipc.FlagFinal, Outputs: []ipc.Tensor{
		{Name: "OUT", DataType: uint8(backendapi.TypeInt32), Shape: []int64{2}, Loc: ipc.LocArena1, Offset: 4096, Size: 8},
		{Name: "INL", DataType: uint8(backendapi.TypeInt32), Shape: []int64{2}, Loc: ipc.LocInline, Size: 8, Data: ipctest.INT32(3, 4)},
	}}}})
	cmd := exec.Command(ipctest.PythonPath, "-c", harnessScript)
	cmd.Env = append(cmd.Environ(), "PYTHONPATH=tests")
	cmd.Stdin = strings.NewReader(hex.EncodeToString(done))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("harness script: %v\n%s", err, errText(err))
	}
	var lines []string
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 6 {
		t.Fatalf("harness printed %d lines, want 4 messages, the inline values and the types:\n%s", len(lines), out)
	}

	args := map[string]string{"model_config": `{"max_batch_size": 4, "name": "m"}`, "model_instance_kind": "CPU",
		"model_instance_name": "m_0_0", "model_instance_device_id": "0", "model_repository": "/models/m", "model_version": "1", "model_name": "m"}
	tests := []struct {
		name string
		want ipc.Message
	}{
		{"Initialize", &ipc.InitializeMsg{ID: 101, Args: args,
			Options: map[string]any{"model_file": "/models/m/1/model.py", "decoupled": true, "force_cpu_only_input_tensors": true}}},
		{"Execute", &ipc.ExecuteMsg{BatchID: 9, Requests: []ipc.Request{{Handle: 7, ID: "r", CorrelationID: uint64(5), Flags: 2,
			Inputs: []ipc.Tensor{
				{Name: "IN", DataType: uint8(backendapi.TypeInt32), Shape: []int64{2}, Loc: ipc.LocArena0, Offset: 64, Size: 8},
				{Name: "S", DataType: uint8(backendapi.TypeBytes), Shape: []int64{1}, Loc: ipc.LocArena0, Offset: 128, Size: 6},
			},
			RequestedOutputs: []string{"OUT"}, ParametersJSON: `{"a": 1}`}}}},
		{"Release", &ipc.ReleaseMsg{Offsets: []uint64{4096}}},
		{"Finalize", &ipc.FinalizeMsg{ID: 102}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := hex.DecodeString(lines[i])
			if err != nil {
				t.Fatal(err)
			}
			got, err := ipc.Decode(b)
			if err != nil {
				t.Fatalf("the harness's %s does not decode: %v", tc.name, err)
			}
			want, err := ipc.Decode(frame(tc.want))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("harness sent\n%#v\nwant\n%#v", got, want)
			}
		})
	}
	t.Run("inline output read", func(t *testing.T) {
		var inline map[string][]int32
		if err := json.Unmarshal([]byte(lines[4]), &inline); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(inline, map[string][]int32{"INL": {3, 4}}) {
			t.Fatalf("harness read inline outputs %v, want INL [3 4]", inline)
		}
	})
	t.Run("data types", func(t *testing.T) {
		var got map[backendapi.DataType]string
		if err := json.Unmarshal([]byte(lines[5]), &got); err != nil {
			t.Fatal(err)
		}
		// numpy's name for each type; BYTES is a list of bytes, not a dtype.
		numpy := map[string]string{"BOOL": "bool", "FP16": "float16", "FP32": "float32", "FP64": "float64", "BF16": "uint16"}
		want := map[backendapi.DataType]string{}
		for d := backendapi.TypeBool; d.Valid(); d++ {
			if d == backendapi.TypeBytes {
				continue
			}
			name, ok := numpy[d.String()]
			if !ok {
				name = strings.ToLower(d.String())
			}
			want[d] = name
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("harness data types %v, want %v", got, want)
		}
	})
}

// errText is the stderr an exec.ExitError carries.
func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
