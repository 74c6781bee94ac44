package stub

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
)

// ErrNotInitialized is reported for an Execute that arrives before a
// successful Initialize.
var ErrNotInitialized = errors.New("model not initialized")

// Exit codes of Serve.
const (
	exitOK       = 0 // finalized
	exitPeerDead = 1 // the supervisor went away
	exitAttach   = 2 // fd 3 is not a region
	exitProtocol = 3 // the supervisor sent something unreadable
)

// Serve runs model in this process as a stub of the supervisor that
// started it, and never returns: the process exits after Finalize (status
// 0), when the supervisor dies (1), when fd 3 is not a region (2), or
// when a frame breaks the protocol (3).
func Serve(model Model) {
	os.Exit(serve(model))
}

func serve(model Model) int {
	// The supervisor owns the life cycle: Finalize, then SIGKILL. The
	// signals are caught and dropped rather than ignored, so that a program
	// the model starts gets the default dispositions back on exec (an
	// ignored signal stays ignored across exec) and the model can stop it.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM)
	// Take the lifeline before anything else can open a descriptor.
	life := openLifeline()
	conn, err := ipc.Attach(os.NewFile(ipc.RegionFD, "stubvisor-region"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "stubvisor Go stub: cannot attach to the region on fd %d: %v\n", ipc.RegionFD, err)
		return exitAttach
	}
	// The heartbeat checks the parent every beat and Pdeathsig ends this
	// process with it: an idle wait for the next command need not wake
	// to look.
	conn.SetIdleSlice(idleSlice)
	h := newHost(conn, model, os.Getenv(ipc.InstanceEnv), life)
	defer h.shm.closeAll()
	return h.run()
}

// host serves one model instance over one connection.
type host struct {
	conn     *ipc.Conn
	model    Model
	instance string

	decoupled bool
	// initialized is read by the IsReady goroutine too (dispatch).
	initialized atomic.Bool

	// reader admits one goroutine into Recv: the main goroutine while it
	// is idle, or a pumping goroutine while Execute runs.
	reader   sync.Mutex
	queuedMu sync.Mutex
	queued   []ipc.Message // commands read by a pump, for the main goroutine

	ownedMu sync.Mutex
	owned   map[uint64]struct{} // arena 1 blocks handed to the supervisor or to a pending response

	cancelMu  sync.Mutex
	cancelled map[uint64]struct{}

	shm *regions // client shared-memory regions mapped in this stub

	exit chan int
}

func newHost(conn *ipc.Conn, model Model, instance string, life int) *host {
	return &host{
		conn: conn, model: model, instance: instance,
		shm:       newRegions(life),
		owned:     map[uint64]struct{}{},
		cancelled: map[uint64]struct{}{},
		exit:      make(chan int, 1),
	}
}

// idleSlice is how long the stub's idle ring wait sleeps between its own
// checks of the parent (the heartbeat makes them too).
const idleSlice = 10 * time.Second

// current is the host of this process, for Logf.
var current atomic.Pointer[host]

// run says Hello, starts the heartbeat and serves commands until Finalize
// or the supervisor's death; it returns the exit status.
func (h *host) run() int {
	current.Store(h)
	hello := &ipc.HelloMsg{Version: ipc.ProtocolVersion, PID: int64(os.Getpid()), Info: map[string]string{"go": runtime.Version(), "backend": "go"}}
	if err := h.conn.Send(hello); err != nil {
		fmt.Fprintf(os.Stderr, "stubvisor Go stub: hello: %v\n", err)
		return exitPeerDead
	}
	stop := make(chan struct{})
	defer close(stop)
	go h.heartbeat(stop)
	for {
		m, err := h.next()
		if err != nil {
			if errors.Is(err, ipc.ErrProtocol) {
				// A corrupt ring cannot be resynchronised: leave, so the
				// supervisor restarts a clean stub.
				fmt.Fprintf(os.Stderr, "stubvisor Go stub: %v\n", err)
				return exitProtocol
			}
			return exitPeerDead
		}
		if code, done := h.command(m); done {
			return code
		}
	}
}

// heartbeat beats every period the supervisor gave (ipc.HeartbeatEnv) and
// ends the process when the supervisor is gone, even while the model is
// stuck in Execute.
func (h *host) heartbeat(stop chan struct{}) {
	t := time.NewTicker(ipc.HeartbeatFromEnv(os.Getenv(ipc.HeartbeatEnv)))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if h.conn.PeerDead() {
				os.Exit(exitPeerDead)
			}
			h.conn.Beat()
		}
	}
}

// next returns the next command for the main goroutine, reading the ring
// itself and handling everything else on the way.
func (h *host) next() (ipc.Message, error) {
	for {
		h.reader.Lock()
		if m := h.popQueued(); m != nil {
			h.reader.Unlock()
			return m, nil
		}
		m, err := h.conn.Recv(time.Time{})
		h.reader.Unlock()
		if err != nil {
			return nil, err
		}
		if isCommand(m) {
			return m, nil
		}
		h.dispatch(m)
	}
}

func (h *host) popQueued() ipc.Message {
	h.queuedMu.Lock()
	defer h.queuedMu.Unlock()
	if len(h.queued) == 0 {
		return nil
	}
	m := h.queued[0]
	h.queued = h.queued[1:]
	return m
}

func isCommand(m ipc.Message) bool {
	switch m.Kind() {
	case ipc.KindInitialize, ipc.KindExecute, ipc.KindFinalize, ipc.KindAutoComplete:
		return true
	}
	return false
}

// pump reads what is queued on the ring without waiting, if no other
// goroutine is reading, so Cancel reaches a running Execute.
func (h *host) pump() {
	if !h.reader.TryLock() {
		return // the main goroutine is reading and handles what comes
	}
	defer h.reader.Unlock()
	for {
		m, err := h.conn.Recv(time.Now())
		if err != nil {
			if errors.Is(err, ipc.ErrPeerDead) || errors.Is(err, ipc.ErrClosed) {
				os.Exit(exitPeerDead)
			}
			return // ErrTimeout: nothing more queued
		}
		if isCommand(m) {
			h.queuedMu.Lock()
			h.queued = append(h.queued, m)
			h.queuedMu.Unlock()
			continue
		}
		h.dispatch(m)
	}
}

// dispatch handles a message that is not a command.
func (h *host) dispatch(m ipc.Message) {
	switch m := m.(type) {
	case *ipc.ReleaseMsg:
		h.freeOwned(m.Offsets)
	case *ipc.CancelMsg:
		h.cancelMu.Lock()
		if len(h.cancelled) >= maxCancelled {
			clear(h.cancelled)
		}
		h.cancelled[m.Handle] = struct{}{}
		h.cancelMu.Unlock()
	case *ipc.MapRegionMsg:
		if err := h.shm.mapRegion(m); err != nil {
			if errors.Is(err, ipc.ErrProtocol) {
				// The fds on the lifeline no longer pair with the ring's
				// messages: any later region could be the wrong one.
				fmt.Fprintf(os.Stderr, "stubvisor Go stub: %v\n", err)
				os.Exit(exitProtocol)
			}
			// Requests naming the region fail with ErrRegionNotMapped.
			h.logf("ERROR", "cannot map client shared memory: %v", err)
		}
	case *ipc.UnmapRegionMsg:
		h.shm.unmap(m.RegionID)
	case *ipc.IsReadyMsg:
		// Not a command: the model's check runs beside Execute, as Triton
		// runs is_ready(), so a slow one holds up no request. The
		// supervisor asks one instance once at a time.
		go func() { h.send(&ipc.ResultMsg{ID: m.ID, Value: h.ready()}) }()
	case *ipc.CollectMetricsMsg:
		h.send(&ipc.ResultMsg{ID: m.ID, Value: []any{}}) // Go models define no custom metrics
	case *ipc.InferResultMsg:
		// Go models make no BLS calls: hand back what a result holds.
		var offs []uint64
		for _, t := range m.Response.Outputs {
			if t.Loc == ipc.LocArena0 && t.Size > 0 {
				offs = append(offs, t.Offset)
			}
		}
		if len(offs) > 0 {
			h.send(&ipc.FreeMsg{Offsets: offs})
		}
	default:
		h.logf("WARNING", "stub ignored a message of unknown kind %d", m.Kind())
	}
}

// maxCancelled bounds the set of cancelled handles, like the Python stub.
const maxCancelled = 65536

func (h *host) isCancelled(handle uint64) bool {
	h.cancelMu.Lock()
	_, ok := h.cancelled[handle]
	h.cancelMu.Unlock()
	return ok
}

func (h *host) forgetCancel(handle uint64) {
	h.cancelMu.Lock()
	delete(h.cancelled, handle)
	h.cancelMu.Unlock()
}

// send sends a message; the supervisor's death ends the process.
func (h *host) send(m ipc.Message) {
	if err := h.conn.Send(m); err != nil {
		if errors.Is(err, ipc.ErrPeerDead) || errors.Is(err, ipc.ErrClosed) {
			os.Exit(exitPeerDead)
		}
		fmt.Fprintf(os.Stderr, "stubvisor Go stub: send %d: %v\n", m.Kind(), err)
	}
}

// alloc takes a block of the stub's arena and remembers it as owned.
func (h *host) alloc(n int) (uint64, []byte, error) {
	off, buf, err := h.conn.Alloc(uint64(n))
	if err != nil {
		return 0, nil, err
	}
	h.ownedMu.Lock()
	h.owned[off] = struct{}{}
	h.ownedMu.Unlock()
	return off, buf, nil
}

// freeOwned frees blocks this stub handed out; others are ignored.
func (h *host) freeOwned(offs []uint64) {
	h.ownedMu.Lock()
	defer h.ownedMu.Unlock()
	for _, off := range offs {
		if _, ok := h.owned[off]; !ok {
			continue
		}
		delete(h.owned, off)
		_ = h.conn.Free(off)
	}
}

// command serves one command; done reports that the process should exit
// with code.
func (h *host) command(m ipc.Message) (code int, done bool) {
	switch m := m.(type) {
	case *ipc.ExecuteMsg:
		h.execute(m)
	case *ipc.InitializeMsg:
		h.initialize(m)
	case *ipc.AutoCompleteMsg:
		// A Go model's configuration is what config.pbtxt says.
		h.send(&ipc.ResultMsg{ID: m.ID, Value: m.ConfigJSON})
	case *ipc.FinalizeMsg:
		if h.initialized.Load() {
			if err := h.model.Finalize(); err != nil {
				h.logf("ERROR", "Finalize() failed: %v", err)
			}
		}
		h.send(&ipc.ResultMsg{ID: m.ID})
		return exitOK, true
	}
	return 0, false
}

func (h *host) initialize(m *ipc.InitializeMsg) {
	if d, ok := m.Options["decoupled"].(bool); ok {
		h.decoupled = d
	}
	if name := m.Args["model_instance_name"]; name != "" && h.instance == "" {
		h.instance = name
	}
	if err := h.model.Initialize(m.Args); err != nil {
		text := backendapi.MessageOf(err)
		h.logf("ERROR", "Failed to initialize Go stub: %s", text)
		h.send(&ipc.ResultMsg{ID: m.ID, Error: &ipc.Error{Code: uint8(backendapi.CodeOf(err)), Message: text}})
		return
	}
	h.initialized.Store(true)
	// Tell the supervisor whether readiness requests must ask the model.
	var value any
	if _, ok := h.model.(ReadyChecker); ok {
		value = map[string]any{"is_ready": true}
	}
	h.send(&ipc.ResultMsg{ID: m.ID, Value: value})
}

func (h *host) ready() bool {
	if !h.initialized.Load() {
		return false
	}
	if r, ok := h.model.(ReadyChecker); ok {
		return r.IsReady()
	}
	return true
}

// Logf sends a log record to the supervisor's log, attributed to the
// caller's file and line; level is "VERBOSE", "INFO", "WARNING" or "ERROR".
// Outside a stub it writes to stderr.
func Logf(level, format string, args ...any) {
	h := current.Load()
	msg := fmt.Sprintf(format, args...)
	if h == nil {
		fmt.Fprintf(os.Stderr, "%s: %s\n", level, msg)
		return
	}
	h.log(level, msg, 2)
}

func (h *host) logf(level, format string, args ...any) {
	h.log(level, fmt.Sprintf(format, args...), 2)
}

func (h *host) log(level, msg string, skip int) {
	_, file, line, _ := runtime.Caller(skip)
	h.send(&ipc.LogMsg{Level: level, Message: msg, File: filepath.Base(file), Line: int64(line)})
}
