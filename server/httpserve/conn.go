package httpserve

import (
	"crypto/tls"
	"net"
	"sync"
	"time"
)

// The fasthttp engine's connections. fasthttp neither ends a request's
// context when its client hangs up nor closes the connections still busy
// when a shutdown runs out of time; net/http does both. A conn gives the
// engine what it needs for them: watch reads the connection in the
// background while a handler runs, as net/http does once a body is read, so
// that a hang-up (EOF or a reset) cancels the request; and the listener
// keeps the set of open connections to close them.
//
// Unlike net/http, the background read starts only once the handler has
// run for watchDelay: most requests end sooner, and a read started and
// aborted around each of them costs a goroutine, a parked read, two
// deadline changes and a wake-up (about a tenth of a small request's CPU
// in the server). A client that hangs up is noticed at most watchDelay
// later than under net/http.

// aLongTimeAgo is a read deadline in the past: it ends a pending read at once.
var aLongTimeAgo = time.Unix(1, 0)

// watchDelay is how long a handler runs before its connection is watched.
const watchDelay = 2 * time.Millisecond

// conn is one accepted connection.
type conn struct {
	net.Conn
	l *trackListener

	mu       sync.Mutex
	stash    []byte // bytes the watch read ahead of the server, returned first
	watching bool   // between watch and unwatch
	reading  bool   // the background read started (watchDelay passed)
	stopping bool
	timer    *time.Timer // starts the background read; reused
	armed    bool        // timer set and not yet fired
	since    time.Time   // when the watch began
	hangup   func()
	wg       sync.WaitGroup
	one      [1]byte

	// Kept by the connection's serving goroutine from one request to the
	// next (bridge.go).
	remote            string
	lastHost, lastURI string
	lastVals          []string
}

// tlsConn is a conn over TLS: fasthttp tells TLS connections apart by
// these methods, and hands their state to the handler.
type tlsConn struct{ *conn }

func (c tlsConn) Handshake() error { return c.Conn.(*tls.Conn).Handshake() }
func (c tlsConn) ConnectionState() tls.ConnectionState {
	return c.Conn.(*tls.Conn).ConnectionState()
}

func (c *conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.watching {
		c.mu.Unlock()
		c.unwatch()
		c.mu.Lock()
	}
	if len(c.stash) > 0 {
		n := copy(p, c.stash)
		c.stash = c.stash[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

func (c *conn) Close() error {
	c.l.forget(c)
	return c.Conn.Close()
}

// watch reads the connection in the background from watchDelay on until
// unwatch, calling hangup if the client closes it or it fails. A byte that
// arrives (the next request of a pipelining client) ends the watch and is
// kept for the server. The body of the request must have been read.
func (c *conn) watch(hangup func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watching {
		return
	}
	c.watching, c.hangup, c.since = true, hangup, time.Now()
	// The header or body deadline the engine set is over with the body.
	_ = c.Conn.SetReadDeadline(time.Time{})
	if c.armed {
		return // it fires within watchDelay, and waits on from since
	}
	c.armed = true
	if c.timer == nil {
		c.timer = time.AfterFunc(watchDelay, c.startRead)
	} else {
		c.timer.Reset(watchDelay)
	}
}

// startRead starts the background read of a connection still watched.
func (c *conn) startRead() {
	c.mu.Lock()
	c.armed = false
	if !c.watching || c.reading {
		c.mu.Unlock()
		return
	}
	if d := watchDelay - time.Since(c.since); d > 0 {
		c.armed = true // set for an earlier watch
		c.timer.Reset(d)
		c.mu.Unlock()
		return
	}
	c.reading = true
	hangup := c.hangup
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		n, err := c.Conn.Read(c.one[:])
		c.mu.Lock()
		if n > 0 {
			c.stash = append(c.stash, c.one[:n]...)
		}
		stopped := c.stopping
		c.mu.Unlock()
		if err != nil && !stopped {
			hangup()
		}
	}()
}

// unwatch ends the watch: it ends the background read, if one started, and
// waits for it. The timer is left to fire: stopping it and setting it again
// for each request costs a wake-up of the runtime's poller each time (a
// timer set earlier than the poller's next one does), about two context
// switches per request.
func (c *conn) unwatch() {
	c.mu.Lock()
	if !c.watching {
		c.mu.Unlock()
		return
	}
	if !c.reading { // a startRead yet to come finds !watching
		c.watching, c.hangup = false, nil
		c.mu.Unlock()
		return
	}
	c.stopping = true
	c.mu.Unlock()
	_ = c.Conn.SetReadDeadline(aLongTimeAgo)
	c.wg.Wait()
	_ = c.Conn.SetReadDeadline(time.Time{})
	c.mu.Lock()
	c.watching, c.reading, c.stopping, c.hangup = false, false, false, nil
	c.mu.Unlock()
}

// trackListener wraps accepted connections in conns and keeps the open ones.
type trackListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*conn]struct{}
}

func newTrackListener(l net.Listener) *trackListener {
	return &trackListener{Listener: l, conns: map[*conn]struct{}{}}
}

func (l *trackListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, l: l}
	l.mu.Lock()
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	if _, ok := nc.(*tls.Conn); ok {
		return tlsConn{c}, nil
	}
	return c, nil
}

func (l *trackListener) forget(c *conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// closeAll closes every open connection.
func (l *trackListener) closeAll() {
	l.mu.Lock()
	open := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		open = append(open, c)
	}
	l.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}

// connOf returns the conn under a connection fasthttp hands a handler.
func connOf(nc net.Conn) *conn {
	switch c := nc.(type) {
	case *conn:
		return c
	case tlsConn:
		return c.conn
	}
	return nil
}
