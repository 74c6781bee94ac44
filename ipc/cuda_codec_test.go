package ipc

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// cudaMessages are the frames CUDA shared memory adds: MapRegion with a
// handle and device, and tensors with loc LocCUDA.
func cudaMessages() map[string]Message {
	handle := bytes.Repeat([]byte{0xfe, 0x01}, 32)
	return map[string]Message{
		"map cuda region":   &MapRegionMsg{RegionID: 7, Size: 1 << 20, CUDAHandle: handle, DeviceID: 1},
		"map system region": &MapRegionMsg{RegionID: 8, Offset: 4096, Size: 64},
		"execute cuda input": &ExecuteMsg{BatchID: 3, Requests: []Request{{
			Handle: 9, ID: "r", CorrelationID: uint64(0), ParametersJSON: "{}", RequestedOutputs: []string{},
			Inputs:        []Tensor{{Name: "IN", DataType: 11, Shape: []int64{4}, Loc: LocCUDA, Offset: 256, Size: 16, RegionID: 7}},
			OutputTargets: []OutputTarget{{Name: "OUT", RegionID: 7, Offset: 512, Size: 16}},
		}}},
	}
}

func TestCUDACodecRoundTrip(t *testing.T) {
	for name, m := range cudaMessages() {
		t.Run(name, func(t *testing.T) { checkRoundTrip(t, m) })
	}
}

// Python reads Go's CUDA frames as the documented arrays (the stub indexes
// them by position), and Go reads a MapRegion Python packs from the
// documented array.
func TestCUDAFramesPython(t *testing.T) {
	ipctest.RequirePython(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	msgs := cudaMessages()
	want := map[string]string{
		"map cuda region":    `[9, 0, 7, 0, 1048576, "` + hex.EncodeToString(bytes.Repeat([]byte{0xfe, 0x01}, 32)) + `", 1]`,
		"map system region":  `[9, 0, 8, 4096, 64]`,
		"execute cuda input": `[2, 3, [[9, "r", 0, 0, [["IN", 11, [4], 4, 256, 16, 7]], [], "{}", 0, [["OUT", 7, 512, 16]]]]]`,
	}
	script := `import sys, json, msgpack
from stubvisor import ipc
def plain(v):
    if isinstance(v, bytes): return v.hex()
    if isinstance(v, list): return [plain(x) for x in v]
    return v
msg = msgpack.unpackb(bytes.fromhex(sys.argv[1]), raw=False, strict_map_key=False)
assert ipc.LOC_CUDA == 4
print(json.dumps(plain(msg)))`
	for name, m := range msgs {
		t.Run(name, func(t *testing.T) {
			b, err := NewEncoder().Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(ipctest.PythonPath, "-c", script, hex.EncodeToString(b))
			cmd.Env = append(cmd.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("python: %v\n%s", err, out)
			}
			var got, exp any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if err := json.Unmarshal([]byte(want[name]), &exp); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, exp) {
				t.Fatalf("python read %s, want %s", out, want[name])
			}
		})
	}
	t.Run("python packs map cuda region", func(t *testing.T) {
		cmd := exec.Command(ipctest.PythonPath, "-c", `import msgpack; print(msgpack.packb([9, 0, 7, 0, 1048576, bytes(range(64)), 2, "future"]).hex())`)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		b, err := hex.DecodeString(string(bytes.TrimSpace(out)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		h := make([]byte, 64)
		for i := range h {
			h[i] = byte(i)
		}
		if exp := (&MapRegionMsg{RegionID: 7, Size: 1 << 20, CUDAHandle: h, DeviceID: 2}); !reflect.DeepEqual(got, exp) {
			t.Fatalf("decoded %#v", got)
		}
	})
}

// checkRoundTrip encodes m and decodes it back, failing unless the result
// equals m.
func checkRoundTrip(t *testing.T, m Message) {
	t.Helper()
	if got := normalized(t, m); !reflect.DeepEqual(got, m) {
		t.Fatalf("decoded\n%#v\nwant\n%#v", got, m)
	}
}
