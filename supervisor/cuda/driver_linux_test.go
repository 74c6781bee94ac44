package cuda_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/supervisor/cuda"
	"github.com/stubvisor/stubvisor/supervisor/cuda/cudatest"
)

// roleEnv switches the test binary into the owner helper: a separate
// process that allocates device memory and exports it, because CUDA
// refuses to open an IPC handle in the process that made it.
const roleEnv = "STUBVISOR_CUDA_TEST_ROLE"

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "owner" {
		os.Exit(owner())
	}
	os.Exit(m.Run())
}

const ownerSize = 8192

// pattern is what the owner writes: byte i is i*7 mod 251.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7 % 251)
	}
	return b
}

// owner allocates ownerSize bytes, fills them with pattern, prints the IPC
// handle in hex, then serves "read OFF N" lines (hex of the bytes) until
// stdin closes.
func owner() int {
	d, err := cuda.Load()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	m, err := d.Alloc(0, ownerSize)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	defer m.Close()
	if err := m.CopyFromHost(0, pattern(ownerSize)); err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	h, err := m.IPCHandle()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println(hex.EncodeToString(h))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var off, n uint64
		if _, err := fmt.Sscanf(in.Text(), "read %d %d", &off, &n); err != nil {
			fmt.Println("ERR", err)
			continue
		}
		buf := make([]byte, n)
		if err := m.CopyToHost(buf, off); err != nil {
			fmt.Println("ERR", err)
			continue
		}
		fmt.Println(hex.EncodeToString(buf))
	}
	return 0
}

type ownerProc struct {
	handle []byte
	in     io.WriteCloser
	out    *bufio.Reader
}

// startOwner runs the owner helper against the driver in the environment;
// cleanup closes its stdin and waits (bounded) for it to exit.
func startOwner(t *testing.T) *ownerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=owner")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = in.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Error("owner helper did not exit")
		}
	})
	p := &ownerProc{in: in, out: bufio.NewReader(stdout)}
	line := p.line(t)
	if p.handle, err = hex.DecodeString(line); err != nil || len(p.handle) != cuda.HandleSize {
		t.Fatalf("owner helper said %q", line)
	}
	return p
}

func (p *ownerProc) line(t *testing.T) string {
	t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := p.out.ReadString('\n')
		ch <- res{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("owner helper: %v", r.err)
		}
		return r.s
	case <-time.After(10 * time.Second):
		t.Fatal("owner helper: no answer in 10s")
	}
	return ""
}

// read asks the owner for its view of the memory.
func (p *ownerProc) read(t *testing.T, off, n int) []byte {
	t.Helper()
	fmt.Fprintf(p.in, "read %d %d\n", off, n)
	b, err := hex.DecodeString(p.line(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadFailures(t *testing.T) {
	fake := cudatest.BuildFake(t)
	cases := []struct {
		name    string
		lib     string
		devices string
		want    error
	}{
		{"missing library", "/nonexistent/libcuda.so.1", "", cuda.ErrNoDriver},
		{"not a driver", "libc.so.6", "", cuda.ErrNoDriver},
		{"no device", fake, "0", cuda.ErrNoDevice},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(cuda.EnvLibrary, tc.lib)
			t.Setenv("FAKECUDA_DEVICES", tc.devices)
			d, err := cuda.Load()
			if !errors.Is(err, tc.want) {
				t.Fatalf("Load: %v, %v; want %v", d, err, tc.want)
			}
		})
	}
}

// eachDriver runs body as a subtest for each driver of cudatest.Drivers,
// with that driver loaded (through cuda.EnvLibrary, as the server loads it)
// and closed at cleanup.
func eachDriver(t *testing.T, body func(t *testing.T, drv cudatest.Driver, d *cuda.Driver)) {
	for _, drv := range cudatest.Drivers(t) {
		t.Run(drv.Name, func(t *testing.T) {
			t.Setenv(cuda.EnvLibrary, drv.Path)
			d, err := cuda.Load()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Close)
			body(t, drv, d)
		})
	}
}

func TestIPCHandle(t *testing.T) {
	eachDriver(t, func(t *testing.T, _ cudatest.Driver, d *cuda.Driver) {
		own := startOwner(t)

		m, err := d.OpenIPCHandle(0, own.handle)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		if m.Size < ownerSize {
			t.Fatalf("allocation of %d bytes, want at least %d", m.Size, ownerSize)
		}
		got := make([]byte, 100)
		if err := m.CopyToHost(got, 1000); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pattern(ownerSize)[1000:1100]) {
			t.Fatalf("read %x", got[:16])
		}
		if err := m.CopyFromHost(4096, []byte("written by the opener")); err != nil {
			t.Fatal(err)
		}
		if got := own.read(t, 4096, 21); string(got) != "written by the opener" {
			t.Fatalf("owner sees %q", got)
		}

		bounds := []struct {
			name string
			off  uint64
			n    int
		}{
			{"past the end", m.Size - 10, 11},
			{"offset past the end", m.Size + 1, 0},
		}
		for _, b := range bounds {
			t.Run(b.name, func(t *testing.T) {
				if err := m.CopyToHost(make([]byte, b.n), b.off); !errors.Is(err, cuda.ErrOutOfRange) {
					t.Fatalf("CopyToHost: %v", err)
				}
				if err := m.CopyFromHost(b.off, make([]byte, b.n)); !errors.Is(err, cuda.ErrOutOfRange) {
					t.Fatalf("CopyFromHost: %v", err)
				}
			})
		}

		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := m.CopyToHost(make([]byte, 1), 0); !errors.Is(err, cuda.ErrClosed) {
			t.Fatalf("copy after Close: %v", err)
		}
	})
}

func TestOpenIPCHandleErrors(t *testing.T) {
	eachDriver(t, func(t *testing.T, drv cudatest.Driver, d *cuda.Driver) {
		cases := []struct {
			name   string
			device int
			handle []byte
			want   error
		}{
			{"short handle", 0, make([]byte, 10), cuda.ErrInvalidHandle},
			{"garbage handle", 0, bytes.Repeat([]byte{0xab}, cuda.HandleSize), cuda.ErrInvalidHandle},
			{"device out of range", d.DeviceCount(), make([]byte, cuda.HandleSize), cuda.ErrInvalidDevice},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				m, err := d.OpenIPCHandle(tc.device, tc.handle)
				if err == nil {
					_ = m.Close()
				}
				if !errors.Is(err, tc.want) {
					// A real driver may name a garbage handle an invalid value.
					if !(drv.Name == "real" && errors.Is(err, cuda.ErrInvalidValue)) {
						t.Fatalf("OpenIPCHandle: %v, want %v", err, tc.want)
					}
				}
			})
		}
	})
}
