package httpserve

import (
	"net"
	"testing"
	"time"
)

// TestConnWatch covers the deferred background read of the fasthttp
// engine's connections: a request that ends before watchDelay reads
// nothing behind the server's back, and one that runs longer learns that
// its client hung up.
func TestConnWatch(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hold       time.Duration // how long the "handler" runs
		hangUp     bool          // the client closes its end meanwhile
		wantHangup bool
		rewatch    bool // an earlier request's watch left the timer set
	}{
		{"a short request starts no read", 0, false, false, false},
		{"a long request reads in the background", 3 * watchDelay, false, false, false},
		{"a client hang-up during a long request", 3 * watchDelay, true, true, false},
		{"after an earlier watch, a short request starts no read", 0, false, false, true},
		{"after an earlier watch, a long request reads in the background", 3 * watchDelay, false, false, true},
		{"after an earlier watch, a client hang-up during a long request", 3 * watchDelay, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := net.Pipe()
			t.Cleanup(func() { server.Close(); client.Close() })
			l := newTrackListener(nil)
			c := &conn{Conn: server, l: l}
			hung := make(chan struct{})
			if tc.rewatch {
				c.watch(func() { t.Error("hang-up reported for an earlier request") })
				c.unwatch()
			}
			start := time.Now()
			c.watch(func() { close(hung) })
			if tc.hangUp {
				client.Close()
			}
			if tc.wantHangup {
				select {
				case <-hung:
				case <-time.After(10 * time.Second):
					t.Fatal("hang-up not noticed")
				}
			} else {
				deadline := time.Now().Add(10 * time.Second)
				for tc.hold > 0 && !c.isReading() && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				switch reading := c.isReading(); {
				case tc.hold > 0 && !reading:
					t.Fatal("no background read after watchDelay")
				case tc.hold == 0 && reading && time.Since(start) < watchDelay:
					t.Fatal("background read started before watchDelay")
				}
			}
			c.unwatch()
			if c.isReading() {
				t.Fatal("still reading after unwatch")
			}
			if tc.hangUp {
				return
			}
			// The next request's bytes reach the server's own Read whole:
			// none was taken by a background read that outlived unwatch.
			go func() { _, _ = client.Write([]byte("next")) }()
			buf := make([]byte, 4)
			_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := c.Read(buf)
			if err != nil || string(buf[:n]) != "next" {
				t.Fatalf("Read = %q, %v", buf[:n], err)
			}
			select {
			case <-hung:
				t.Fatal("hang-up reported for a client that stayed")
			default:
			}
		})
	}
}

func (c *conn) isReading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reading
}
