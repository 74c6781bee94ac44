package clientshm

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
)

// shmObject creates a POSIX shm object of size bytes and returns its key;
// the test removes it at cleanup.
func shmObject(t *testing.T, size int64) string {
	t.Helper()
	key := "/stubvisor-clientshm-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + strconv.Itoa(os.Getpid())
	f, err := os.OpenFile("/dev/shm"+key, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove("/dev/shm" + key) })
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return key
}

// mapper records the regions it was told to unmap.
type mapper struct{ unmapped []string }

func (m *mapper) Unmap(r *Region) { m.unmapped = append(m.unmapped, r.Name()) }

// A region unregistered while a request uses it stays until the request
// releases it; then the stubs that mapped it are told to let go.
func TestRegionOutlivesUnregisterWhileInUse(t *testing.T) {
	var c Registry
	key := shmObject(t, 4096)
	if err := c.RegisterSystem("r", key, 0, 4096); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterSystem("r", key, 0, 4096); !errors.Is(err, backendapi.AlreadyExists) {
		t.Fatalf("second register: %v, want ALREADY_EXISTS", err)
	}
	r, err := c.Acquire(&backendapi.SharedMemoryRef{Region: "r", Offset: 1024, ByteSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	m := &mapper{}
	c.AddMapper(r, m)
	c.Unregister("r", false)
	if st, err := c.SystemStatus("r"); err != nil || len(st) != 1 {
		t.Fatalf("status while in use: %+v, %v; want the region still listed", st, err)
	}
	c.Release([]*Region{r})
	if _, err := c.SystemStatus("r"); !errors.Is(err, backendapi.NotFound) {
		t.Fatalf("status after the last release: %v, want NOT_FOUND", err)
	}
	if len(m.unmapped) != 1 || m.unmapped[0] != "r" {
		t.Fatalf("unmapped %v, want [r]", m.unmapped)
	}
}

func TestAcquireChecksThePlace(t *testing.T) {
	var c Registry
	if err := c.RegisterSystem("r", shmObject(t, 4096), 0, 4096); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseAll)
	for _, tc := range []struct {
		name string
		ref  backendapi.SharedMemoryRef
		want string
	}{
		{"unknown region", backendapi.SharedMemoryRef{Region: "x", ByteSize: 4}, "Unable to find shared memory region: 'x'"},
		{"offset past the end", backendapi.SharedMemoryRef{Region: "r", Offset: 4096, ByteSize: 4}, "Invalid offset for shared memory region: 'r'"},
		{"past the end", backendapi.SharedMemoryRef{Region: "r", Offset: 4000, ByteSize: 200}, "Invalid offset + byte size for shared memory region: 'r'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.Acquire(&tc.ref); backendapi.MessageOf(err) != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
