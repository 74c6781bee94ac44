package main

// The shm benchmark: a 64 MiB FP32 identity through system shared memory
// (input region -> model -> output region, the model's one copy into the
// output region) against the same tensor over binary HTTP, with a memcpy
// of 64 MiB in the same run as the yardstick.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	register("shm", "64 MiB FP32 identity via system shared memory vs binary HTTP vs memcpy", runShmBench)
}

const shmBenchBytes = 64 << 20

func runShmBench(args []string) error {
	fs := flag.NewFlagSet("shm", flag.ContinueOnError)
	duration := fs.Duration("duration", 3*time.Second, "measured time per case")
	sf := addServerFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	env, err := newBenchEnv("shm", sf, benchModel{"identity_fp32", "identity_fp32", ""})
	if err != nil {
		return err
	}
	defer env.close()

	// Yardstick: memcpy of the same size, in this process, this run.
	src, dst := make([]byte, shmBenchBytes), make([]byte, shmBenchBytes)
	for i := range src {
		src[i] = byte(i)
	}
	memcpy, _ := timeShm("memcpy-64MiB", *duration, func() error { copy(dst, src); return nil })

	srv, err := env.start("HTTP", "--allow-client-shm=true", "--http-max-input-size", strconv.Itoa(2*shmBenchBytes))
	if err != nil {
		return err
	}
	defer srv.stop()
	cl := &http.Client{Timeout: time.Minute}

	in, err := newBenchRegion("in")
	if err != nil {
		return err
	}
	defer in.close()
	out, err := newBenchRegion("out")
	if err != nil {
		return err
	}
	defer out.close()
	copy(in.mem, src)
	for name, r := range map[string]*benchRegion{"bench_in": in, "bench_out": out} {
		body := fmt.Sprintf(`{"key":%q,"offset":0,"byte_size":%d}`, r.key, shmBenchBytes)
		if err := shmPost(cl, srv.url()+"/v2/systemsharedmemory/region/"+name+"/register", []byte(body), nil); err != nil {
			return fmt.Errorf("register %s: %w", name, err)
		}
	}
	shmReq := []byte(fmt.Sprintf(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[%d],"parameters":{"shared_memory_region":"bench_in","shared_memory_byte_size":%d}}],`+
		`"outputs":[{"name":"OUTPUT0","parameters":{"shared_memory_region":"bench_out","shared_memory_byte_size":%d}}]}`, shmBenchBytes/4, shmBenchBytes, shmBenchBytes))
	if err := shmPost(cl, srv.url()+"/v2/models/identity_fp32/infer", shmReq, nil); err != nil {
		return fmt.Errorf("shm infer: %w", err)
	}
	if !bytes.Equal(in.mem, out.mem) {
		return errors.New("shm identity: the output region differs from the input")
	}
	viaShm, err := timeShm("identity-fp32-64MiB-shm", *duration, func() error {
		return shmPost(cl, srv.url()+"/v2/models/identity_fp32/infer", shmReq, nil)
	})
	if err != nil {
		return err
	}

	header := []byte(fmt.Sprintf(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[%d],"parameters":{"binary_data_size":%d}}],`+
		`"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`, shmBenchBytes/4, shmBenchBytes))
	binReq := append(append([]byte{}, header...), src...)
	hdr := http.Header{"Inference-Header-Content-Length": {strconv.Itoa(len(header))}, "Content-Type": {"application/octet-stream"}}
	if err := shmPost(cl, srv.url()+"/v2/models/identity_fp32/infer", binReq, hdr); err != nil {
		return fmt.Errorf("binary infer: %w", err)
	}
	viaHTTP, err := timeShm("identity-fp32-64MiB-binary-http", *duration, func() error {
		return shmPost(cl, srv.url()+"/v2/models/identity_fp32/infer", binReq, hdr)
	})
	if err != nil {
		return err
	}
	fmt.Printf("shm ratio shm/memcpy=%.3f shm/binary-http=%.2f\n", viaShm/memcpy, viaShm/viaHTTP)
	return nil
}

// timeShm runs op back to back for d and at least three times, then prints
// the case and returns its bandwidth in MB/s. The first error ends it.
func timeShm(name string, d time.Duration, op func() error) (float64, error) {
	n, start := 0, time.Now()
	for time.Since(start) < d || n < 3 {
		if err := op(); err != nil {
			return 0, err
		}
		n++
	}
	return printShm(name, n, time.Since(start)), nil
}

// printShm prints one case and returns its bandwidth in MB/s.
func printShm(name string, n int, d time.Duration) float64 {
	rps := float64(n) / d.Seconds()
	mbps := rps * shmBenchBytes / 1e6
	fmt.Printf("shm %s rps=%.2f MBps=%.0f\n", name, rps, mbps)
	return mbps
}

func shmPost(cl *http.Client, url string, body []byte, h http.Header) error {
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// benchRegion is a POSIX shm object of shmBenchBytes, mapped here.
type benchRegion struct {
	key, path string
	mem       []byte
}

func newBenchRegion(name string) (*benchRegion, error) {
	file := fmt.Sprintf("stubvisor-bench-%s-%d", name, os.Getpid())
	path := "/dev/shm/" + file
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, shmBenchBytes); err != nil {
		_ = unix.Unlink(path)
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, shmBenchBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Unlink(path)
		return nil, err
	}
	return &benchRegion{key: "/" + file, path: path, mem: mem}, nil
}

func (r *benchRegion) close() {
	_ = unix.Munmap(r.mem)
	_ = unix.Unlink(r.path)
}
