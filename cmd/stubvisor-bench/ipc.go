package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/stubvisor/stubvisor/ipc"
)

// The ipc benchmark measures the wire between the supervisor and a stub:
//
//	go-py-roundtrip-64B      Execute with one 64-byte input in arena 0 to a
//	                         Python stub (stubvisor.ipc), ExecuteDone back
//	go-go-roundtrip-64B      the same with a Go stub (package ipc)
//	go-py-stream-64B         Execute frames one way as fast as the Python
//	                         stub takes them; p50/p99 are per message,
//	                         averaged over windows of streamWindow frames
//	go-py-roundtrip-1MiB     a 1 MiB input written into arena 0 (one copy),
//	                         copied by the stub into arena 1 (one copy) and
//	                         returned as the output, then Released
//	uds-go-py-roundtrip-64B  the 64-byte exchange over a Unix stream socket,
//	                         message and payload inline: the yardstick
//	memcpy-1MiB              one 1 MiB copy into an arena block: the floor
//	                         of each direction of the 1 MiB round trip
//
// msgs_per_s counts round trips per second for the round-trip cases and
// frames per second for the stream.
func init() {
	register("ipc", "shared-memory wire: Go<->Python and Go<->Go round trips, stream, 1 MiB, Unix-socket yardstick", runIPC)
	registerRole("ipc-echo", ipcEchoRole)
}

const streamWindow = 1000

type ipcBench struct {
	python string
	peer   string // ipc/testdata/peer.py
	pypath string // python/ for PYTHONPATH
	n      int
	spin   time.Duration
}

func runIPC(args []string) error {
	fs := flag.NewFlagSet("ipc", flag.ContinueOnError)
	python := fs.String("python", "/usr/bin/python3", "Python interpreter with numpy and msgpack")
	n := fs.Int("n", 20000, "round trips per 64-byte case (the stream sends 10x, the 1 MiB case n/10)")
	spin := fs.Duration("spin", ipc.DefaultSettings().Spin, "poll time before a futex sleep (written in the region header)")
	only := fs.String("cases", "", "comma-separated case names to run (default all, and the ratio line)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	b := &ipcBench{
		python: *python,
		peer:   filepath.Join(root, "ipc", "testdata", "peer.py"),
		pypath: filepath.Join(root, "python"),
		n:      *n,
		spin:   *spin,
	}
	cases := []struct {
		name string
		run  func() (Stats, error)
	}{
		{"go-py-roundtrip-64B", func() (Stats, error) { return b.roundTrip("python", 64, b.n) }},
		{"go-go-roundtrip-64B", func() (Stats, error) { return b.roundTrip("go", 64, b.n) }},
		{"go-py-stream-64B", b.stream},
		{"go-py-roundtrip-1MiB", func() (Stats, error) { return b.roundTrip("python", 1<<20, max(b.n/10, 100)) }},
		{"uds-go-py-roundtrip-64B", b.uds},
		{"memcpy-1MiB", func() (Stats, error) { return memcpy(1<<20, max(b.n/10, 100)) }},
	}
	results := map[string]Stats{}
	for _, c := range cases {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), c.name) {
			continue
		}
		s, err := c.run()
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		printCase("ipc", c.name, s)
		results[c.name] = s
	}
	if shm, uds, ok := pair(results, "go-py-roundtrip-64B", "uds-go-py-roundtrip-64B"); ok {
		speedup := float64(uds.P50) / float64(shm.P50)
		met := shm.P50 <= 5*time.Microsecond && speedup >= 5
		fmt.Printf("ipc ratio go-py-roundtrip-64B_vs_uds p50_speedup=%.1f msgs_per_s_speedup=%.1f target=p50<=5us,speedup>=5 met=%v\n",
			speedup, shm.PerSecond/uds.PerSecond, met)
	}
	if big, cp, ok := pair(results, "go-py-roundtrip-1MiB", "memcpy-1MiB"); ok {
		// Two copies per round trip (one each way) is the design; the
		// rest is the two 64-byte-scale exchanges and page faults.
		fmt.Printf("ipc ratio go-py-roundtrip-1MiB_vs_memcpy p50_memcpys=%.1f target<=2+overhead\n",
			float64(big.P50)/float64(cp.P50))
	}
	return nil
}

// peerProc is a running stub for one case.
type peerProc struct {
	cmd  *exec.Cmd
	done chan error
}

// start creates a region and starts a stub of lang playing role on it,
// with extra files from fd 4 on, and waits for its Hello.
func (b *ipcBench) start(lang, role string, s ipc.Settings, extra ...*os.File) (*ipc.Conn, *peerProc, error) {
	c, err := ipc.Create("bench-"+role, s)
	if err != nil {
		return nil, nil, err
	}
	var cmd *exec.Cmd
	if lang == "go" {
		exe, err := os.Executable()
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		cmd = exec.Command(exe)
		cmd.Env = append(os.Environ(), roleEnv+"="+role)
	} else {
		cmd = exec.Command(b.python, b.peer, role)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+b.pypath)
	}
	cmd.ExtraFiles = append([]*os.File{c.File()}, extra...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.Close()
		return nil, nil, err
	}
	p := &peerProc{cmd: cmd, done: make(chan error, 1)}
	go func() {
		err := cmd.Wait()
		c.MarkDead() // the supervisor's reaper
		p.done <- err
	}()
	m, err := c.Recv(time.Now().Add(30 * time.Second))
	if err == nil {
		if _, ok := m.(*ipc.HelloMsg); !ok {
			err = fmt.Errorf("first message %T, want Hello", m)
		}
	}
	if err != nil {
		p.stop(c)
		return nil, nil, fmt.Errorf("%s stub %s: %w", lang, role, err)
	}
	return c, p, nil
}

// finish sends Finalize, waits for the Result and the exit, then closes.
func (p *peerProc) finish(c *ipc.Conn) (*ipc.ResultMsg, error) {
	defer p.stop(c)
	if err := c.Send(&ipc.FinalizeMsg{ID: 1}); err != nil {
		return nil, err
	}
	for {
		m, err := c.Recv(time.Now().Add(30 * time.Second))
		if err != nil {
			return nil, err
		}
		if r, ok := m.(*ipc.ResultMsg); ok {
			return r, nil
		}
	}
}

func (p *peerProc) stop(c *ipc.Conn) {
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	c.Close()
}

// roundTrip times n Execute/ExecuteDone exchanges carrying size bytes in
// arena 0. For sizes above 64 bytes the stub copies the input into its
// arena (the serve role) and this side reads the returned view and
// Releases it, so each direction costs one copy.
func (b *ipcBench) roundTrip(lang string, size, n int) (Stats, error) {
	role := "bench-echo"
	if lang == "go" {
		role = "ipc-echo"
	}
	big := size > 64
	if big {
		role = "bench-big"
	}
	s := ipc.DefaultSettings()
	s.Spin = b.spin
	c, p, err := b.start(lang, role, s)
	if err != nil {
		return Stats{}, err
	}
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	off, buf, err := c.Alloc(uint64(size))
	if err != nil {
		p.stop(c)
		return Stats{}, err
	}
	req := []ipc.Request{{Inputs: []ipc.Tensor{{Name: "INPUT0", DataType: 2, Shape: []int64{int64(size)}, Loc: ipc.LocArena0, Offset: off, Size: uint64(size)}}}}
	msg := &ipc.ExecuteMsg{Requests: req}
	release := &ipc.ReleaseMsg{Offsets: make([]uint64, 1)}
	warm := min(n/5, 2000)
	samples := make([]time.Duration, 0, n)
	var start time.Time
	for i := -warm; i < n; i++ {
		if i == 0 {
			start = time.Now()
		}
		t0 := time.Now()
		src[0] = byte(i)
		copy(buf, src) // the payload goes into this side's arena: one copy
		msg.BatchID = uint64(i + warm)
		req[0].Handle = msg.BatchID
		if err := c.Send(msg); err != nil {
			p.stop(c)
			return Stats{}, err
		}
		m, err := c.Recv(time.Now().Add(10 * time.Second))
		if err != nil {
			p.stop(c)
			return Stats{}, err
		}
		done, ok := m.(*ipc.ExecuteDoneMsg)
		if !ok || done.BatchID != msg.BatchID || len(done.Responses) != 1 || done.Responses[0].Error != nil || len(done.Responses[0].Outputs) != 1 {
			p.stop(c)
			return Stats{}, fmt.Errorf("unexpected reply %+v", m)
		}
		out := done.Responses[0].Outputs[0]
		if big {
			v, err := c.View(out.Loc, out.Offset, out.Size)
			if err != nil || len(v) != size || v[0] != byte(i) || v[size-1] != src[size-1] {
				p.stop(c)
				return Stats{}, fmt.Errorf("bad output view: %v", err)
			}
			release.Offsets[0] = out.Offset
			if err := c.Send(release); err != nil {
				p.stop(c)
				return Stats{}, err
			}
		}
		if i >= 0 {
			samples = append(samples, time.Since(t0))
		}
	}
	elapsed := time.Since(start)
	if _, err := p.finish(c); err != nil {
		return Stats{}, err
	}
	return summarize(samples, n, elapsed), nil
}

// stream sends 10n Execute frames one way; the stub counts them.
func (b *ipcBench) stream() (Stats, error) {
	s := ipc.DefaultSettings()
	s.Spin = b.spin
	c, p, err := b.start("python", "bench-stream", s)
	if err != nil {
		return Stats{}, err
	}
	off, buf, err := c.Alloc(64)
	if err != nil {
		p.stop(c)
		return Stats{}, err
	}
	copy(buf, "sixty-four bytes of tensor data, written once for the stream...")
	req := []ipc.Request{{Inputs: []ipc.Tensor{{Name: "INPUT0", DataType: 11, Shape: []int64{16}, Loc: ipc.LocArena0, Offset: off, Size: 64}}}}
	msg := &ipc.ExecuteMsg{Requests: req}
	total := 10 * b.n / streamWindow * streamWindow
	samples := make([]time.Duration, 0, total/streamWindow)
	start := time.Now()
	win := start
	for i := 1; i <= total; i++ {
		msg.BatchID = uint64(i)
		req[0].Handle = uint64(i)
		if err := c.Send(msg); err != nil {
			p.stop(c)
			return Stats{}, err
		}
		if i%streamWindow == 0 {
			now := time.Now()
			samples = append(samples, now.Sub(win)/streamWindow)
			win = now
		}
	}
	r, err := p.finish(c) // its Result arrives after the stub took every frame
	elapsed := time.Since(start)
	if err != nil {
		return Stats{}, err
	}
	if got, _ := r.Value.(int64); got != int64(total) {
		return Stats{}, fmt.Errorf("stub counted %v frames, sent %d", r.Value, total)
	}
	return summarize(samples, total, elapsed), nil
}

// uds runs the 64-byte exchange over a Unix stream socket: each frame is
// u32 message length, u32 payload length, the msgpack message, the payload.
func (b *ipcBench) uds() (Stats, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return Stats{}, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "uds"), os.NewFile(uintptr(fds[1]), "uds-peer")
	s := ipc.DefaultSettings()
	s.Spin = b.spin
	c, p, err := b.start("python", "uds-echo", s, theirs)
	theirs.Close()
	if err != nil {
		mine.Close()
		return Stats{}, err
	}
	conn, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		p.cmd.Process.Kill()
		p.stop(c)
		return Stats{}, err
	}
	defer func() {
		conn.Close() // EOF ends the peer's loop
		p.stop(c)
	}()
	payload := make([]byte, 64)
	req := []ipc.Request{{Inputs: []ipc.Tensor{{Name: "INPUT0", DataType: 11, Shape: []int64{16}, Loc: ipc.LocNone, Size: 64}}}}
	msg := &ipc.ExecuteMsg{Requests: req}
	enc, dec := ipc.NewEncoder(), ipc.NewDecoder()
	out := make([]byte, 0, 512)
	in := make([]byte, 64<<10)
	warm := min(b.n/5, 2000)
	samples := make([]time.Duration, 0, b.n)
	var start time.Time
	for i := -warm; i < b.n; i++ {
		if i == 0 {
			start = time.Now()
		}
		t0 := time.Now()
		msg.BatchID = uint64(i + warm)
		req[0].Handle = msg.BatchID
		payload[0] = byte(i)
		body, err := enc.Encode(msg)
		if err != nil {
			return Stats{}, err
		}
		out = binary.LittleEndian.AppendUint32(out[:0], uint32(len(body)))
		out = binary.LittleEndian.AppendUint32(out, uint32(len(payload)))
		out = append(append(out, body...), payload...)
		if _, err := conn.Write(out); err != nil {
			return Stats{}, err
		}
		if _, err := io.ReadFull(conn, in[:8]); err != nil {
			return Stats{}, err
		}
		ml, pl := binary.LittleEndian.Uint32(in), binary.LittleEndian.Uint32(in[4:])
		if int(ml)+int(pl) > len(in)-8 {
			return Stats{}, errors.New("reply frame too large")
		}
		if _, err := io.ReadFull(conn, in[8:8+ml+pl]); err != nil {
			return Stats{}, err
		}
		m, err := dec.Decode(in[8 : 8+ml])
		if err != nil {
			return Stats{}, err
		}
		if d, ok := m.(*ipc.ExecuteDoneMsg); !ok || d.BatchID != msg.BatchID || pl != 64 || in[8+ml] != byte(i) {
			return Stats{}, fmt.Errorf("unexpected reply %+v", m)
		}
		if i >= 0 {
			samples = append(samples, time.Since(t0))
		}
	}
	return summarize(samples, b.n, time.Since(start)), nil
}

func pair(r map[string]Stats, a, b string) (Stats, Stats, bool) {
	x, ok1 := r[a]
	y, ok2 := r[b]
	return x, y, ok1 && ok2
}

// memcpy times copying size bytes into a block of a shared arena, the
// floor of one direction of the 1 MiB round trip.
func memcpy(size, n int) (Stats, error) {
	c, err := ipc.Create("bench-memcpy", ipc.DefaultSettings())
	if err != nil {
		return Stats{}, err
	}
	defer c.Close()
	_, dst, err := c.Alloc(uint64(size))
	if err != nil {
		return Stats{}, err
	}
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	samples := make([]time.Duration, 0, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		src[0] = byte(i)
		copy(dst, src)
		samples = append(samples, time.Since(t0))
	}
	return summarize(samples, n, time.Since(start)), nil
}

// ipcEchoRole is the Go stub of go-go-roundtrip-64B: it answers each
// Execute with an ExecuteDone naming the input bytes as the output.
func ipcEchoRole() int {
	c, err := ipc.Attach(os.NewFile(3, "region"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "attach:", err)
		return 2
	}
	defer c.Close()
	if err := c.Send(&ipc.HelloMsg{Version: ipc.ProtocolVersion, PID: int64(os.Getpid())}); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		return 2
	}
	resp := []ipc.Response{{Flags: ipc.FlagFinal}}
	done := &ipc.ExecuteDoneMsg{Responses: resp}
	for {
		m, err := c.Recv(time.Time{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "recv:", err)
			return 1
		}
		switch m := m.(type) {
		case *ipc.ExecuteMsg:
			done.BatchID = m.BatchID
			resp[0].Handle = m.Requests[0].Handle
			resp[0].Outputs = m.Requests[0].Inputs
			if _, err := c.View(resp[0].Outputs[0].Loc, resp[0].Outputs[0].Offset, resp[0].Outputs[0].Size); err != nil {
				fmt.Fprintln(os.Stderr, "view:", err)
				return 1
			}
			err = c.Send(done)
		case *ipc.FinalizeMsg:
			return exitCode(c.Send(&ipc.ResultMsg{ID: m.ID}))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "send:", err)
			return 1
		}
	}
}

func exitCode(err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
