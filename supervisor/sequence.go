package supervisor

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// sequenceBatcher is Triton's sequence batcher. Every sequence (a
// correlation id) is bound to one slot of one instance for its whole life,
// because the model keeps the sequence's state in that stub process. Each
// instance is a lane with a fixed number of slots; a sequence that finds no
// free slot waits in a backlog until one frees. A lane forms a batch from
// the next request of each of its sequences (never two of one sequence),
// holds a sequence's next request back until the previous one ended, so
// the model sees each sequence's requests in order, and hands the batch
// to its instance's direct queue when the stub has a pipeline slot.
//
// The control inputs (START, END, READY, CORRID) are added to each request
// as input tensors. A sequence idle for longer than
// max_sequence_idle_microseconds loses its slot, and a sequence whose stub
// died ends: its state is gone with the process.
type sequenceBatcher struct {
	mv       *modelVersion
	idle     time.Duration
	slots    int // per instance
	controls []seqControl
	// ctrlShape is the shape of one control tensor: [1], or [1,1] when the
	// model batches.
	ctrlShape []int64

	mu       sync.Mutex
	stopped  bool
	lanes    []*lane // one per instance, made on first use
	seqs     map[seqKey]*sequence
	backlog  []*sequence
	tomb     map[seqKey]string // why a recently gone sequence ended
	tombKeys []seqKey          // tomb's keys, oldest first

	stopc chan struct{}
	wg    sync.WaitGroup
}

// seqKey identifies a sequence; uint64 and string ids never collide.
type seqKey struct {
	text bool
	u    uint64
	s    string
}

func keyOf(id backendapi.CorrelationID) seqKey {
	if id.IsText {
		return seqKey{text: true, s: id.String}
	}
	return seqKey{u: id.Uint}
}

func (k seqKey) String() string {
	if k.text {
		return k.s
	}
	return strconv.FormatUint(k.u, 10)
}

// sequence is one live correlation id.
type sequence struct {
	key      seqKey
	lane     *lane // nil while in the backlog
	slot     int
	proc     *stubProc // the stub that holds its state, once known
	queue    []*pending
	inflight bool
	last     time.Time
	ended    bool // its END request arrived; it leaves once drained
}

// lane is one instance's slots.
type lane struct {
	inst        *instance
	slots       []*sequence
	outstanding int // batches handed to the instance and not yet ended
}

// seqControl is one control input the batcher injects.
type seqControl struct {
	name  string
	kind  inferencepb.ModelSequenceBatching_Control_Kind
	dtype backendapi.DataType
	// off and on are the encoded false and true values (START, END, READY).
	off, on []byte
}

// How many ended sequences the batcher remembers, to explain a request
// for one of them.
const tombstones = 4096

func newSequenceBatcher(mv *modelVersion, sb *inferencepb.ModelSequenceBatching) (*sequenceBatcher, error) {
	s := &sequenceBatcher{
		mv:    mv,
		idle:  time.Duration(sb.GetMaxSequenceIdleMicroseconds()) * time.Microsecond,
		seqs:  map[seqKey]*sequence{},
		tomb:  map[seqKey]string{},
		stopc: make(chan struct{}),
	}
	if s.idle <= 0 {
		s.idle = time.Second
	}
	s.slots = max(int(mv.sig.maxBatch), 1)
	if old := sb.GetOldest(); old != nil && old.GetMaxCandidateSequences() > 0 {
		s.slots = int(old.GetMaxCandidateSequences())
	}
	s.ctrlShape = []int64{1}
	if mv.sig.maxBatch > 0 {
		s.ctrlShape = []int64{1, 1}
	}
	for _, ci := range sb.GetControlInput() {
		for _, c := range ci.GetControl() {
			sc := seqControl{name: ci.GetName(), kind: c.GetKind()}
			switch {
			case len(c.GetInt32FalseTrue()) == 2:
				sc.dtype = backendapi.TypeInt32
				v := c.GetInt32FalseTrue()
				sc.off = binary.LittleEndian.AppendUint32(nil, uint32(v[0]))
				sc.on = binary.LittleEndian.AppendUint32(nil, uint32(v[1]))
			case len(c.GetFp32FalseTrue()) == 2:
				sc.dtype = backendapi.TypeFP32
				v := c.GetFp32FalseTrue()
				sc.off = binary.LittleEndian.AppendUint32(nil, math.Float32bits(v[0]))
				sc.on = binary.LittleEndian.AppendUint32(nil, math.Float32bits(v[1]))
			case len(c.GetBoolFalseTrue()) == 2:
				sc.dtype = backendapi.TypeBool
				v := c.GetBoolFalseTrue()
				sc.off, sc.on = []byte{boolByte(v[0])}, []byte{boolByte(v[1])}
			case c.GetKind() == inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID:
				sc.dtype = configType(c.GetDataType())
			default:
				return nil, backendapi.Errorf(backendapi.InvalidArg, "model '%s': sequence batching control '%s' needs two false/true values", mv.name, ci.GetName())
			}
			s.controls = append(s.controls, sc)
		}
	}
	s.wg.Add(1)
	go s.reap()
	return s, nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// enqueue checks the request's place in its sequence, adds the control
// inputs and queues it behind the sequence's earlier requests.
func (s *sequenceBatcher) enqueue(pr *pending) error {
	req := pr.req
	m := s.mv.name
	if req.CorrelationID.IsZero() {
		return backendapi.Errorf(backendapi.InvalidArg, "inference request to model '%s' must specify a non-zero or non-empty correlation ID", m)
	}
	if s.mv.sig.maxBatch > 0 && pr.batch != 1 {
		return backendapi.Errorf(backendapi.InvalidArg, "inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher", m)
	}
	key := keyOf(req.CorrelationID)
	start := req.Flags&backendapi.FlagSequenceStart != 0
	end := req.Flags&backendapi.FlagSequenceEnd != 0
	inputs, err := s.controlInputs(req, start, end)
	if err != nil {
		return err
	}
	nr := *req
	nr.Inputs = append(append(make([]backendapi.InputTensor, 0, len(req.Inputs)+len(inputs)), req.Inputs...), inputs...)
	pr.req = &nr

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return backendapi.Errorf(backendapi.Unavailable, "model '%s' version %d is being unloaded", m, s.mv.version)
	}
	if s.lanes == nil {
		for _, inst := range s.mv.instances {
			s.lanes = append(s.lanes, &lane{inst: inst, slots: make([]*sequence, s.slots)})
		}
	}
	seq := s.seqs[key]
	if seq == nil {
		if !start {
			msg := fmt.Sprintf("inference request for sequence %s to model '%s' must specify the START flag on the first request of the sequence", key, m)
			if why, ok := s.tomb[key]; ok {
				msg += "; " + why
			}
			return backendapi.Errorf(backendapi.InvalidArg, "%s", msg)
		}
		seq = &sequence{key: key}
		s.seqs[key] = seq
		delete(s.tomb, key)
		s.bind(seq)
	}
	// A START for a live sequence starts it over in the same slot: the
	// model sees START and resets its state.
	seq.queue = append(seq.queue, pr)
	seq.last = time.Now()
	if end {
		seq.ended = true
		delete(s.seqs, key)
		s.bury(key, "the sequence ended with an earlier request that had the END flag")
	}
	if seq.lane != nil {
		s.pump(seq.lane)
	}
	return nil
}

// controlInputs builds the control tensors of one request.
func (s *sequenceBatcher) controlInputs(req *backendapi.InferRequest, start, end bool) ([]backendapi.InputTensor, error) {
	out := make([]backendapi.InputTensor, 0, len(s.controls))
	for _, c := range s.controls {
		t := backendapi.InputTensor{Name: c.name, DataType: c.dtype, Shape: s.ctrlShape}
		switch c.kind {
		case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START:
			t.Data = pick(start, c)
		case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END:
			t.Data = pick(end, c)
		case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY:
			t.Data = c.on
		case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID:
			data, err := corrIDBytes(req.CorrelationID, c.dtype)
			if err != nil {
				return nil, backendapi.Errorf(backendapi.InvalidArg, "inference request to model '%s': %v", s.mv.name, err)
			}
			t.Data = data
		default:
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

func pick(v bool, c seqControl) []byte {
	if v {
		return c.on
	}
	return c.off
}

// corrIDBytes encodes a correlation id as the CORRID control's data type.
func corrIDBytes(id backendapi.CorrelationID, dt backendapi.DataType) ([]byte, error) {
	if dt == backendapi.TypeBytes {
		s := id.String
		if !id.IsText {
			s = strconv.FormatUint(id.Uint, 10)
		}
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(s))), s...), nil
	}
	if id.IsText {
		return nil, fmt.Errorf("string correlation ID '%s' given, but the CORRID control input has data type %s", id.String, dt)
	}
	switch dt {
	case backendapi.TypeUint64, backendapi.TypeInt64:
		return binary.LittleEndian.AppendUint64(nil, id.Uint), nil
	case backendapi.TypeUint32, backendapi.TypeInt32:
		if id.Uint > math.MaxUint32 {
			return nil, fmt.Errorf("correlation ID %d does not fit the CORRID control input's data type %s", id.Uint, dt)
		}
		return binary.LittleEndian.AppendUint32(nil, uint32(id.Uint)), nil
	}
	return nil, fmt.Errorf("CORRID control input has unsupported data type %s", dt)
}

// bind gives a new sequence a slot on the least loaded instance, or puts
// it in the backlog. Called with s.mu held.
func (s *sequenceBatcher) bind(seq *sequence) {
	var best *lane
	bestUsed, bestSlot := 0, -1
	for _, l := range s.lanes {
		used, free := 0, -1
		for i, q := range l.slots {
			if q != nil {
				used++
			} else if free < 0 {
				free = i
			}
		}
		if free < 0 {
			continue
		}
		// A ready instance beats one whose stub is restarting.
		if best == nil || (l.inst.ready() && !best.inst.ready()) || (l.inst.ready() == best.inst.ready() && used < bestUsed) {
			best, bestUsed, bestSlot = l, used, free
		}
	}
	if best == nil {
		s.backlog = append(s.backlog, seq)
		return
	}
	seq.lane, seq.slot = best, bestSlot
	best.slots[bestSlot] = seq
}

// release frees a sequence's slot and gives it to the oldest backlogged
// sequence. Called with s.mu held.
func (s *sequenceBatcher) release(seq *sequence) {
	l := seq.lane
	if l == nil {
		for i, q := range s.backlog {
			if q == seq {
				s.backlog = append(s.backlog[:i], s.backlog[i+1:]...)
				break
			}
		}
		return
	}
	l.slots[seq.slot] = nil
	seq.lane = nil
	if len(s.backlog) > 0 {
		next := s.backlog[0]
		s.backlog = s.backlog[1:]
		next.lane, next.slot = l, seq.slot
		l.slots[seq.slot] = next
	}
	s.pump(l)
}

// bury remembers why a sequence is gone. Called with s.mu held.
func (s *sequenceBatcher) bury(key seqKey, why string) {
	if _, ok := s.tomb[key]; !ok {
		s.tombKeys = append(s.tombKeys, key)
	}
	s.tomb[key] = why
	for len(s.tombKeys) > tombstones {
		delete(s.tomb, s.tombKeys[0])
		s.tombKeys = s.tombKeys[1:]
	}
}

// pump hands the lane's instance a batch: the next request of every
// sequence that has none running, when the instance has room. Called with
// s.mu held.
func (s *sequenceBatcher) pump(l *lane) {
	for l.outstanding < s.mv.pipelineDepth {
		cur := l.inst.currentProc()
		var items []*pending
		var members []*sequence
		for _, seq := range l.slots {
			if seq == nil || seq.inflight || len(seq.queue) == 0 {
				continue
			}
			if seq.proc != nil && (seq.proc != cur || !cur.alive()) {
				s.lose(seq)
				continue
			}
			if seq.proc == nil {
				seq.proc = cur
			}
			pr := seq.queue[0]
			seq.queue = seq.queue[1:]
			seq.inflight = true
			items = append(items, pr)
			members = append(members, seq)
		}
		if len(items) == 0 {
			return
		}
		l.outstanding++
		// direct holds at most mv.pipelineDepth of this lane's batches, far
		// below its capacity, so the send does not block.
		l.inst.direct <- &batch{items: items}
		s.wg.Add(1)
		go s.await(l, items, members)
	}
}

// lose ends a sequence whose stub died: its state is gone, so its waiting
// requests fail and later ones are refused. Called with s.mu held.
func (s *sequenceBatcher) lose(seq *sequence) {
	why := fmt.Sprintf("the stub process of instance '%s' that held the sequence's state died", seq.lane.inst.name)
	err := backendapi.Errorf(backendapi.Unavailable, "inference request for sequence %s to model '%s' cannot continue: %s; start the sequence again with the START flag", seq.key, s.mv.name, why)
	for _, pr := range seq.queue {
		go s.mv.finish(pr, nil, err, true)
	}
	seq.queue = nil
	if s.seqs[seq.key] == seq {
		delete(s.seqs, seq.key)
		s.bury(seq.key, why)
	}
	seq.ended = true
	if !seq.inflight {
		s.release(seq)
	}
}

// await waits for a batch's requests to end, then lets each sequence send
// its next request.
func (s *sequenceBatcher) await(l *lane, items []*pending, members []*sequence) {
	defer s.wg.Done()
	for _, pr := range items {
		select {
		case <-pr.done:
		case <-s.stopc:
			return
		}
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	l.outstanding--
	for _, seq := range members {
		seq.inflight = false
		seq.last = now
		if seq.ended && len(seq.queue) == 0 && seq.lane == l {
			s.release(seq)
		}
	}
	s.pump(l)
}

// reap reclaims idle sequences and ends those whose stub died.
func (s *sequenceBatcher) reap() {
	defer s.wg.Done()
	tick := time.NewTicker(min(max(s.idle/4, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case now := <-tick.C:
			s.mu.Lock()
			for _, seq := range s.seqs {
				if seq.inflight || len(seq.queue) > 0 {
					continue
				}
				if seq.lane != nil && seq.proc != nil && (seq.proc != seq.lane.inst.currentProc() || !seq.proc.alive()) {
					s.lose(seq)
					continue
				}
				if now.Sub(seq.last) > s.idle {
					s.mv.sup.log.Info("sequence reclaimed after being idle", "model", s.mv.name, "sequence", seq.key.String(), "idle", s.idle)
					delete(s.seqs, seq.key)
					s.bury(seq.key, fmt.Sprintf("the sequence was reclaimed after being idle for longer than max_sequence_idle_microseconds (%d)", s.idle.Microseconds()))
					s.release(seq)
				}
			}
			s.mu.Unlock()
		}
	}
}

// stop ends the batcher: waiting requests fail, as the model is going
// away, and so do batches its instances have not taken yet.
func (s *sequenceBatcher) stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	var waiting []*pending
	for _, seq := range s.seqs {
		waiting = append(waiting, seq.queue...)
		seq.queue = nil
	}
	for _, l := range s.lanes {
		for _, seq := range l.slots {
			if seq != nil {
				waiting = append(waiting, seq.queue...)
				seq.queue = nil
			}
		}
	}
	for _, seq := range s.backlog {
		waiting = append(waiting, seq.queue...)
		seq.queue = nil
	}
	s.mu.Unlock()
	close(s.stopc)
	s.wg.Wait()
	err := backendapi.Errorf(backendapi.Unavailable, "model '%s' was unloaded before the request ran", s.mv.name)
	for _, pr := range waiting {
		s.mv.finish(pr, nil, err, true)
	}
	for _, inst := range s.mv.instances {
		for {
			select {
			case b := <-inst.direct:
				for _, pr := range b.items {
					s.mv.finish(pr, nil, err, true)
				}
				continue
			default:
			}
			break
		}
	}
}
