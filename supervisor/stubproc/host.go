package stubproc

import (
	"context"
	"os/exec"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/supervisor/clientshm"
)

// Host is the way up: what a stub process needs from the instance that
// runs it, handed over at spawn, so that the process's jobs (reader,
// exchange, watchdog) never reach through the instance and the model to
// the supervisor.
type Host interface {
	// Finish hands a request one response, or ends it (final): the model
	// version records its statistics and answers its caller.
	Finish(pr *Request, resp *backendapi.InferResponse, err error, final bool)
	// Executed records one execute of size batch elements that ran for d,
	// before its responses go out.
	Executed(size int64, d time.Duration)
	// Direct carries batches that must run on this instance (sequences);
	// Queue the batches any instance of the model may take. The stub only
	// receives from them.
	Direct() chan *Batch
	Queue() <-chan *Batch
	// Heartbeat reports that the stub's heartbeat advanced at t;
	// Unhealthy that it has not for a while.
	Heartbeat(t time.Time)
	Unhealthy()
	// Stopping reports whether the instance is being stopped: a stub that
	// dies now is not replaced.
	Stopping() bool
	// BLS serves an inference request the stub's model makes: on the
	// reader that found it until the call ends or stop closes, then on a
	// goroutine of its own (a nil stop never closes; the reader started
	// one goroutine per call then). BLSCancel cancels one, and Control
	// serves the model loading API of pb_utils (on a goroutine of its own).
	BLS(p *Proc, m *ipc.InferExecMsg, stop <-chan struct{})
	BLSCancel(p *Proc, m *ipc.InferCancelMsg)
	Control(p *Proc, m *ipc.ModelControlMsg)
	// Recycle asks for the stub to be replaced (it reached
	// Config.MaxRequests); the stub takes no more work meanwhile.
	Recycle(p *Proc, cause string)
}

// Confinement is what a stub process runs confined by (a memory limit):
// Config.Confine sets it up before the start, Started applies it to the
// running process before the model is loaded, ExitCause explains an exit
// it caused ("" for any other), and Close releases it once the process is
// reaped.
type Confinement interface {
	Started(pid int) error
	ExitCause(ws syscall.WaitStatus) string
	Close()
}

// Config is what a stub process is told at spawn: who it is and the
// settings it runs under.
type Config struct {
	Instance string // Triton's instance name, <model>_<group>_<index>
	Model    string
	Version  int64
	Kind     string // modelconfig.KindPython or KindGo
	// Decoupled models may answer a request any number of times.
	Decoupled bool
	// Batched is max_batch_size > 0: outputs have a batch dimension (classification).
	Batched bool
	// Labels are the classification labels of each output.
	Labels map[string][]string
	// ExecuteTimeout (EXECUTE_TIMEOUT_MS; 0: none) kills a stub whose
	// execute runs longer.
	ExecuteTimeout time.Duration
	// PipelineDepth is how many Execute messages the stub may have queued.
	PipelineDepth int

	IPC              ipc.Settings
	StartTimeout     time.Duration // from spawn to the stub's Hello
	HeartbeatTimeout time.Duration // a stub silent this long is killed
	Regions          *clientshm.Registry
	Launcher         *Launcher
	Log              hclog.Logger
	// Command builds the stub's process; Diagnose adds a hint to a stub
	// that failed before its handshake.
	Command  func() (*exec.Cmd, error)
	Diagnose func() string
	// Confine, when set, confines each process; it may change cmd (its
	// environment, its SysProcAttr.CgroupFD) before the start.
	Confine func(cmd *exec.Cmd) (Confinement, error)
	// Gate, when set, admits each execute (the rate limiter): the stub
	// then takes one execute at a time, only through Dispatch, which
	// holds the grant until that execute ends or the stub dies (gate.go).
	Gate Gate
	// MaxRequests (MAX_REQUESTS_PER_STUB; 0: no limit): once the stub was
	// sent this many requests it takes no more and Host.Recycle is asked.
	MaxRequests uint64
}

// Gate admits executes: the rate limiter (package ratelimit, through the
// supervisor).
type Gate interface {
	// Acquire waits, bounded by ctx, for the grant of one execute.
	Acquire(ctx context.Context) (Grant, error)
}

// Grant is what one execute holds while it runs.
type Grant interface {
	// Release gives it back once the execute ended (idempotent).
	Release()
	// Renew gives it back and asks for the next in one step, bounded by
	// ctx: an instance with more work competes for its next execute with
	// those waiting now, as Triton stages such an instance again before
	// it picks the next. On error nothing is held.
	Renew(ctx context.Context) (Grant, error)
}
