package procstat

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	pageKiB := pageSize / 1024
	for _, tc := range []struct {
		name, in string
		want     Stat
		wantErr  bool
	}{
		{
			name: "plain command",
			in:   "42 (python3) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 100 1000000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0",
			want: Stat{CPUSeconds: 3, Threads: 7, RSSBytes: 300 * pageKiB * 1024},
		},
		{
			name: "command with spaces and parentheses",
			in:   "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 100 4 0",
			want: Stat{CPUSeconds: 0.03, Threads: 1, RSSBytes: 4 * pageKiB * 1024},
		},
		{name: "no parenthesis", in: "7 python S 1", wantErr: true},
		{name: "too short", in: "7 (x) S 1 2 3", wantErr: true},
		{name: "not a number", in: "7 (x) S 1 7 7 0 -1 0 0 0 0 0 x 2 0 0 20 0 1 0 5 100 4 0", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st Stat
			err := parseStat([]byte(tc.in), &st)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStat error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && st != tc.want {
				t.Errorf("parseStat = %+v, want %+v", st, tc.want)
			}
		})
	}
}

// TestReadSelf checks each figure against a change the test makes to its
// own process.
func TestReadSelf(t *testing.T) {
	before, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.Threads < 1 || before.RSSBytes == 0 || before.OpenFDs < 3 {
		t.Fatalf("implausible reading of the test process: %+v", before)
	}

	const files = 20
	for i := 0; i < files; i++ {
		f, err := os.Open(filepath.Join(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
	}
	const grow = 64 << 20
	mem := make([]byte, grow)
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	deadline := time.Now().Add(100 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		mem[x%len(mem)]++
	}

	after, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got := after.OpenFDs - before.OpenFDs; got < files {
		t.Errorf("open fds grew by %d after opening %d files", got, files)
	}
	if got := int64(after.RSSBytes) - int64(before.RSSBytes); got < grow*3/4 {
		t.Errorf("RSS grew by %d bytes after touching %d", got, grow)
	}
	if rss, err := RSS(os.Getpid()); err != nil || rss < after.RSSBytes*3/4 || rss > after.RSSBytes*5/4 {
		t.Errorf("RSS() = %d, %v; Read's RSSBytes = %d", rss, err, after.RSSBytes)
	}
	if after.CPUSeconds <= before.CPUSeconds {
		t.Errorf("CPU seconds %v -> %v after 100ms of work", before.CPUSeconds, after.CPUSeconds)
	}
	// CPU reads the same figure as Read: between the readings before and
	// after it (the clock tick rounds both).
	cpu, err := CPU(os.Getpid())
	later, err2 := Read(os.Getpid())
	if err != nil || err2 != nil || cpu.Seconds() < after.CPUSeconds || cpu.Seconds() > later.CPUSeconds {
		t.Errorf("CPU() = %v, %v; Read's CPUSeconds %v before it and %v (%v) after", cpu, err, after.CPUSeconds, later.CPUSeconds, err2)
	}
	mem[0]++
}

func TestParseIdle(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Duration
		wantErr  bool
	}{
		{"idle plus iowait", "cpu  1080661 649 278396 1060709 5640 0 43652 4386 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n", 10663490 * time.Millisecond, false},
		{"the first line alone", "cpu 1 2 3 100 50", 1500 * time.Millisecond, false},
		{"a CPU's line first", "cpu0 1 2 3 4 5\n", 0, true},
		{"too short", "cpu 1 2 3 4\n", 0, true},
		{"not a number", "cpu 1 2 3 x 5\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseIdle([]byte(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("parseIdle(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestIdleTime reads the machine's idle time: at least /proc/uptime's
// idle figure read before it (which leaves out iowait), at most all the
// CPUs' time since boot.
func TestIdleTime(t *testing.T) {
	uptime := func() (up, idle float64) {
		b, err := os.ReadFile("/proc/uptime")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscan(string(b), &up, &idle); err != nil {
			t.Fatalf("/proc/uptime %q: %v", b, err)
		}
		return up, idle
	}
	_, idle0 := uptime()
	got, err := IdleTime()
	if err != nil {
		t.Fatal(err)
	}
	up1, _ := uptime()
	if got.Seconds() < idle0-0.01 || got.Seconds() > up1*float64(runtime.NumCPU())+0.01 {
		t.Fatalf("IdleTime() = %v; /proc/uptime: idle %.2f s before, up %.2f s after, %d CPUs", got, idle0, up1, runtime.NumCPU())
	}
}

func TestReadGone(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	// The child is reaped: its pid names no process (unless reused, which
	// would take a wrap of the pid space within this test).
	if _, err := Read(cmd.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a reaped process: %v, want fs.ErrNotExist", err)
	}
	if _, err := RSS(cmd.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("RSS of a reaped process: %v, want fs.ErrNotExist", err)
	}
	if _, err := CPU(cmd.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CPU of a reaped process: %v, want fs.ErrNotExist", err)
	}
}
