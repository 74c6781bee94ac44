package main

// The status page at / in a real browser: headless Chromium loads it, runs
// its script (which polls /v2/stubs) and dumps the DOM it built; the test
// reads the data attributes the page puts on every model and stub.

import (
	"context"
	"errors"
	"html"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// chromiumPath finds Debian's Chromium, skipping the test without it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("the status page test needs Chromium (apt-get install chromium)")
	return ""
}

// pageDOM loads url in headless Chromium and returns the DOM after the
// page's script ran for a virtual second and a half (its first refreshes
// of /v2/stubs; virtual time waits for the fetches).
func pageDOM(t *testing.T, chromium, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-first-run", "--disable-dev-shm-usage", "--disable-crash-reporter", "--disable-breakpad",
		"--user-data-dir="+t.TempDir(),
		"--virtual-time-budget=1500", "--dump-dom", url)
	// Chromium forks helpers; its own process group lets the test end
	// them all if it hangs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if cmd.Process != nil {
		// Reap any helper that outlived the browser process.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("chromium did not finish within 60s:\n%s", stderr.String())
	}
	return string(out)
}

var (
	attrRE    = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)
	causeRE   = regexp.MustCompile(`<td class="cause" title="([^"]*)">([^<]*)</td>`)
	restartRE = regexp.MustCompile(`<td class="restarts num">([^<]*)</td>`)
)

// pageElement finds the element <tag ... id="id" ...> and returns its
// attributes and its HTML up to the closing tag.
func pageElement(t *testing.T, dom, tag, id string) (map[string]string, string) {
	t.Helper()
	i := strings.Index(dom, `<`+tag+` `)
	for i >= 0 {
		end := strings.IndexByte(dom[i:], '>')
		open := dom[i : i+end+1]
		if strings.Contains(open, ` id="`+id+`"`) {
			attrs := map[string]string{}
			for _, m := range attrRE.FindAllStringSubmatch(open, -1) {
				attrs[m[1]] = html.UnescapeString(m[2])
			}
			body := dom[i:]
			if j := strings.Index(body, "</"+tag+">"); j >= 0 {
				body = body[:j]
			}
			return attrs, body
		}
		next := strings.Index(dom[i+1:], `<`+tag+` `)
		if next < 0 {
			break
		}
		i += 1 + next
	}
	t.Fatalf("the page has no <%s id=%q>; DOM:\n%s", tag, id, dom)
	return nil, ""
}

// TestStatusPage loads / in Chromium, checks what it shows, kills the
// stub and checks that the page shows it came back.
func TestStatusPage(t *testing.T) {
	slow(t)
	ipctest.RequirePython(t)
	chromium := chromiumPath(t)
	s := startServer(t, copyRepo(t, "add_sub"), "--stub-restart-backoff", "50ms")

	check := func(t *testing.T, want stubStatus) {
		t.Helper()
		dom := pageDOM(t, chromium, s.HTTP+"/")
		status, _ := pageElement(t, dom, "span", "status")
		if status["data-ok"] != "true" {
			t.Errorf("the page says its refresh failed: %q", dom[strings.Index(dom, `id="status"`):][:200])
		}
		if !strings.Contains(dom, "triton protocol, version "+version) {
			t.Errorf("the page does not show the server version")
		}
		sec, _ := pageElement(t, dom, "section", "model-add_sub-1")
		if sec["data-model"] != "add_sub" || sec["data-version"] != "1" || sec["data-state"] != "READY" {
			t.Errorf("model section %v, want add_sub version 1 READY", sec)
		}
		row, rowHTML := pageElement(t, dom, "tr", "stub-add_sub_0_0")
		if row["data-state"] != "ready" || row["data-pid"] != strconv.Itoa(want.PID) || row["data-restarts"] != strconv.Itoa(want.Restarts) {
			t.Errorf("stub row %v, want state ready pid %d restarts %d", row, want.PID, want.Restarts)
		}
		if m := restartRE.FindStringSubmatch(rowHTML); m == nil || m[1] != strconv.Itoa(want.Restarts) {
			t.Errorf("restarts cell %v, want %d", m, want.Restarts)
		}
		shown := "-"
		if want.LastCause != "" {
			shown = want.LastCause
		}
		if m := causeRE.FindStringSubmatch(rowHTML); m == nil || html.UnescapeString(m[2]) != shown {
			t.Errorf("last exit cell %v, want %q", m, shown)
		}
	}

	t.Run("shows the running stub", func(t *testing.T) {
		st := oneStub(t, s, "add_sub")
		if st.PID <= 0 || st.Restarts != 0 {
			t.Fatalf("stub before the kill: %+v", st)
		}
		check(t, st)
	})

	t.Run("shows the restart after SIGKILL", func(t *testing.T) {
		before := oneStub(t, s, "add_sub")
		if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var after stubStatus
		waitFor(t, 30*time.Second, "the stub to come back", func() bool {
			after = oneStub(t, s, "add_sub")
			return after.Restarts == 1 && after.State == "ready" && after.PID != before.PID && after.PID > 0
		})
		if !strings.Contains(after.LastCause, "killed") {
			t.Errorf("exit cause %q does not say the stub was killed", after.LastCause)
		}
		check(t, after)
	})
}
