package ipc

import (
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// goConstants are the wire constants Python must mirror, by their Python
// names.
func goConstants() map[string]int64 {
	return map[string]int64{
		"PROTOCOL_VERSION": ProtocolVersion, "MAGIC": int64(Magic),
		"HDR_MAGIC": HdrMagic, "HDR_VERSION": HdrVersion, "HDR_FLAGS": HdrFlags, "HDR_REGION_SIZE": HdrRegionSize,
		"HDR_RING0_OFF": HdrRing0Off, "HDR_RING1_OFF": HdrRing1Off, "HDR_RING_BYTES": HdrRingBytes, "HDR_SPIN_NS": HdrSpinNs,
		"HDR_ARENA0_OFF": HdrArena0Off, "HDR_ARENA1_OFF": HdrArena1Off, "HDR_ARENA_MAX": HdrArenaMax,
		"HDR_ARENA_DEFAULT": HdrArenaDefault, "HDR_ARENA_GROWTH": HdrArenaGrowth, "HEADER_SIZE": HeaderSize,
		"CTL_DEAD": CtlDead, "CTL_STUB_PID": CtlStubPID, "CTL_SUP_HEARTBEAT": CtlSupHeartbeat,
		"CTL_STUB_HEARTBEAT": CtlStubHeartbeat, "CTL_ARENA0_USAGE": CtlArena0Usage, "CTL_ARENA1_USAGE": CtlArena1Usage, "CTL_MSG_POLL": CtlMsgPoll,
		"RING0_OFF": Ring0Off, "RING_INDEX_BYTES": RingIndexBytes, "RING_TAIL": RingTail, "RING_HEAD": RingHead,
		"RING_READER_SLEEPING": RingReaderSleeping, "RING_WRITER_SLEEPING": RingWriterSleeping,
		"WRAP_MARKER": WrapMarker, "FRAME_ALIGN": FrameAlign, "FRAME_HEADER_BYTES": FrameHeaderBytes,
		"MIN_RING_BYTES": MinRingBytes, "MAX_RING_BYTES": MaxRingBytes, "MAX_SPIN_NS": int64(maxSpin),
		"PAGE_SIZE": 4096, "BLOCK_ALIGN": 64,
		"KIND_INITIALIZE": int64(KindInitialize), "KIND_EXECUTE": int64(KindExecute), "KIND_FINALIZE": int64(KindFinalize),
		"KIND_RELEASE": int64(KindRelease), "KIND_CANCEL": int64(KindCancel), "KIND_IS_READY": int64(KindIsReady),
		"KIND_AUTO_COMPLETE": int64(KindAutoComplete), "KIND_INFER_RESULT": int64(KindInferResult),
		"KIND_HELLO": int64(KindHello), "KIND_RESULT": int64(KindResult), "KIND_RESPONSE": int64(KindResponse),
		"KIND_EXECUTE_DONE": int64(KindExecuteDone), "KIND_LOG": int64(KindLog), "KIND_INFER_EXEC": int64(KindInferExec),
		"KIND_FREE": int64(KindFree), "KIND_MAP_REGION": int64(KindMapRegion), "KIND_UNMAP_REGION": int64(KindUnmapRegion),
		"KIND_COLLECT_METRICS": int64(KindCollectMetrics), "KIND_CONTROL_RESULT": int64(KindControlResult),
		"KIND_INFER_CANCEL": int64(KindInferCancel), "KIND_MODEL_CONTROL": int64(KindModelCtl),
		"LOC_CLIENT": LocClient, "LOC_CUDA": LocCUDA, "LOC_INLINE": LocInline, "INLINE_MAX": InlineMax,
		"LOC_ARENA0": LocArena0, "LOC_ARENA1": LocArena1, "LOC_NONE": LocNone, "FLAG_FINAL": FlagFinal,
		"REGION_FD": RegionFD, "LIFELINE_FD": LifelineFD, "HEARTBEAT_PERIOD_MS": HeartbeatPeriod.Milliseconds(),
	}
}

// goNames are the process protocol's names Python must mirror.
var goNames = map[string]string{"INSTANCE_ENV": InstanceEnv, "MODEL_ENV": ModelEnv, "HEARTBEAT_ENV": HeartbeatEnv}

func TestConstantsMatchPython(t *testing.T) {
	noLeaks(t)
	ipctest.RequirePython(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ipctest.PythonPath, "-c", "import json; from stubvisor import ipc; print(json.dumps(ipc.constants()))")
	cmd.Env = append(cmd.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var py map[string]int64
	if err := json.Unmarshal(out, &py); err != nil {
		t.Fatal(err)
	}
	for name, want := range goConstants() {
		got, ok := py[name]
		switch {
		case !ok:
			t.Errorf("python/stubvisor/ipc.py lacks %s (Go: %d)", name, want)
		case got != want:
			t.Errorf("%s: Python %d, Go %d", name, got, want)
		}
	}
	for name := range py {
		if _, ok := goConstants()[name]; !ok {
			t.Errorf("python/stubvisor/ipc.py has %s, which Go does not define", name)
		}
	}
	cmd = exec.Command(ipctest.PythonPath, "-c", "import json; from stubvisor import ipc; print(json.dumps(ipc.names()))")
	cmd.Env = append(cmd.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
	if out, err = cmd.Output(); err != nil {
		t.Fatalf("python: %v", err)
	}
	var pyNames map[string]string
	if err := json.Unmarshal(out, &pyNames); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(pyNames, goNames) {
		t.Errorf("process protocol names: Python %v, Go %v", pyNames, goNames)
	}
	// The layout itself: Python must place rings and arenas where Go does.
	l, _ := newLayout(DefaultSettings())
	cmd = exec.Command(ipctest.PythonPath, "-c", `import json; from stubvisor import ipc
print(json.dumps(ipc.layout(1<<20, 50000, 1<<30, 1<<20, 1<<20)))`)
	cmd.Env = append(cmd.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
	if out, err = cmd.Output(); err != nil {
		t.Fatal(err)
	}
	var pl map[string]uint64
	if err := json.Unmarshal(out, &pl); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"region_size": l.regionSize, "ring0_off": l.ring0, "ring1_off": l.ring1,
		"arena0_off": l.arena0, "arena1_off": l.arena1, "arena_max": l.arenaMax}
	for k, v := range want {
		if pl[k] != v {
			t.Errorf("layout %s: Python %d, Go %d", k, pl[k], v)
		}
	}
}
