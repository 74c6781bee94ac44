package main

// The status page's plots in a real browser: a model that leaks memory on
// purpose serves requests for a few seconds, then headless Chromium takes
// a screenshot of the page, and the test finds the RSS and latency lines
// in its pixels by their colours (status.html uses them nowhere else).

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// The first RSS line's colour and the latency line's (status.html).
var (
	rssColor     = color.RGBA{0xd9, 0x48, 0x0f, 0xff}
	latencyColor = color.RGBA{0x5f, 0x3d, 0xc4, 0xff}
)

// leakHistory is the part of GET /v2/stubs?history=1 the test reads.
type leakHistory struct {
	Model   string `json:"model"`
	History []struct {
		T         int64             `json:"t"`
		Requests  uint64            `json:"requests"`
		LatencyUS float64           `json:"latency_us"`
		RSS       map[string]uint64 `json:"rss"`
	} `json:"history"`
	Stubs []struct {
		RSS      uint64  `json:"rss_bytes"`
		CPU      float64 `json:"cpu_seconds"`
		FDs      int     `json:"open_fds"`
		Threads  int     `json:"threads"`
		Requests uint64  `json:"requests"`
	} `json:"stubs"`
}

// leakRequest asks the leak model to keep mb more MiB and returns what it
// holds.
func leakRequest(t *testing.T, s *server, mb int) int {
	t.Helper()
	code, body := s.httpInferJSON("leak", map[string]any{
		"inputs": []map[string]any{{"name": "LEAK_MB", "datatype": "INT32", "shape": []int{1}, "data": []int{mb}}},
	})
	if code != 200 {
		t.Fatalf("leak request: status %d: %s", code, body)
	}
	var r struct {
		Outputs []struct {
			Data []int `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(body, &r); err != nil || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != 1 {
		t.Fatalf("leak response %s: %v", body, err)
	}
	return r.Outputs[0].Data[0]
}

// screenshot loads url in headless Chromium and returns its PNG.
func screenshot(t *testing.T, chromium, url string, w, h int) image.Image {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "page.png")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-first-run", "--disable-dev-shm-usage", "--disable-crash-reporter", "--disable-breakpad",
		"--hide-scrollbars", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size="+strconv.Itoa(w)+","+strconv.Itoa(h),
		"--virtual-time-budget=1500", "--screenshot="+out, url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v\n%s", err, stderr.String())
	}
	if keep := os.Getenv("STUBVISOR_SCREENSHOT"); keep != "" {
		_ = os.WriteFile(keep, b, 0o644)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	return img
}

// line is where a colour's pixels lie in an image: how many, and the
// topmost pixel of the leftmost and rightmost columns that have any.
type line struct {
	pixels              int
	left, right         int
	leftTopY, rightTopY int
}

func findLine(img image.Image, want color.RGBA) line {
	near := func(a, b uint32) bool {
		d := int(a>>8) - int(b)
		return d >= -24 && d <= 24
	}
	l := line{left: -1}
	bounds := img.Bounds()
	for x := bounds.Min.X; x < bounds.Max.X; x++ {
		for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if !near(r, uint32(want.R)) || !near(g, uint32(want.G)) || !near(b, uint32(want.B)) {
				continue
			}
			l.pixels++
			if l.left < 0 {
				l.left, l.leftTopY = x, y
			}
			if x != l.right || l.pixels == 1 {
				l.right, l.rightTopY = x, y
			}
		}
	}
	return l
}

func TestStatusPagePlots(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	chromium := chromiumPath(t)
	s := startServer(t, copyRepo(t, "leak"))

	// Leak 8 MiB per sample the server takes (one a second), with
	// requests that leak nothing in between, until the history holds six
	// samples with the stub's RSS and four with a request latency.
	var h []leakHistory
	held, sampled := 0, -1
	deadline := time.Now().Add(60 * time.Second)
	for {
		mb := 0
		if len(h) == 1 && len(h[0].History) > sampled {
			mb, sampled = 8, len(h[0].History)
		}
		held = leakRequest(t, s, mb)
		s.getJSON("/v2/models/leak/stubs?history=1", &h)
		withRSS, withLatency := 0, 0
		for _, p := range h[0].History {
			if p.RSS["leak_0_0"] > 0 {
				withRSS++
			}
			if p.Requests > 0 && p.LatencyUS > 0 {
				withLatency++
			}
		}
		if withRSS >= 6 && withLatency >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s the history has %d samples with RSS and %d with latency: %+v", withRSS, withLatency, h)
		}
	}
	hist := h[0].History
	first, last := hist[0].RSS["leak_0_0"], hist[len(hist)-1].RSS["leak_0_0"]
	if last < first+16<<20 {
		t.Errorf("the RSS history does not show the leak: %d -> %d bytes (the model holds %d MiB)", first, last, held)
	}
	st := h[0].Stubs[0]
	if st.RSS < uint64(held)<<20 || st.Threads < 1 || st.FDs < 3 || st.CPU <= 0 || st.Requests == 0 {
		t.Errorf("stub figures %+v: want RSS above the %d MiB held, threads, fds, CPU time and requests", st, held)
	}

	t.Run("Prometheus", func(t *testing.T) {
		text, _ := s.scrape()
		labels := `{instance="leak_0_0",model="leak",version="1"} `
		for _, tc := range []struct {
			name string
			min  float64
		}{
			{"stubvisor_stub_resident_memory_bytes", float64(held << 20)},
			{"stubvisor_stub_cpu_seconds_total", 0.01},
			{"stubvisor_stub_open_fds", 3},
			{"stubvisor_stub_threads", 1},
			{"stubvisor_stub_requests", 1},
		} {
			m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(tc.name+labels) + `(\S+)$`).FindStringSubmatch(text)
			if m == nil {
				t.Errorf("no %s%s in the scrape", tc.name, labels)
				continue
			}
			if v, err := strconv.ParseFloat(m[1], 64); err != nil || v < tc.min {
				t.Errorf("%s = %s, want at least %v", tc.name, m[1], tc.min)
			}
		}
	})

	t.Run("DOM", func(t *testing.T) {
		dom := pageDOM(t, chromium, s.HTTP+"/")
		rss, _ := pageElement(t, dom, "svg", "rss-leak-1")
		if n, _ := strconv.Atoi(rss["data-points"]); n < 6 || rss["data-series"] != "1" {
			t.Errorf("RSS plot %v: want one series of at least 6 points", rss)
		}
		if max, _ := strconv.ParseUint(rss["data-max"], 10, 64); max < last {
			t.Errorf("RSS plot max %d, want at least the last sample's %d", max, last)
		}
		lat, _ := pageElement(t, dom, "svg", "latency-leak-1")
		if n, _ := strconv.Atoi(lat["data-points"]); n < 4 {
			t.Errorf("latency plot %v: want at least 4 points", lat)
		}
		row, _ := pageElement(t, dom, "tr", "stub-leak_0_0")
		if v, _ := strconv.ParseUint(row["data-rss"], 10, 64); v < uint64(held)<<20 {
			t.Errorf("row RSS %q, want at least %d MiB", row["data-rss"], held)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		img := screenshot(t, chromium, s.HTTP+"/", 1600, 900)
		if b := img.Bounds(); b.Dx() != 1600 || b.Dy() != 900 {
			t.Fatalf("screenshot is %v, want 1600x900", b)
		}
		rss := findLine(img, rssColor)
		if rss.pixels < 20 || rss.right-rss.left < 5 {
			t.Fatalf("the screenshot has no RSS line: %+v", rss)
		}
		// The leak rises: the line ends higher (smaller y) than it starts.
		if rss.rightTopY >= rss.leftTopY {
			t.Errorf("the RSS line does not rise: %+v", rss)
		}
		// The latency series may cover only the last few one-second
		// samples (a busy machine takes fewer), a few pixels of a
		// 5-minute axis, and a steady latency draws it flat: ask for a
		// drawn segment, not a length.
		if lat := findLine(img, latencyColor); lat.pixels < 6 || lat.right <= lat.left {
			t.Errorf("the screenshot has no latency line: %+v", lat)
		}
	})
}
