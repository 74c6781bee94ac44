package sched

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
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
//
// With iterative_sequence, a sequence is one request that the model runs
// step by step: it releases the request with RESCHEDULE to have it queued
// again at the head of its sequence (no longer START), and the sequence
// ends when the request completes. A request without a correlation id
// starts such a sequence under an id the batcher picks.
type sequenceBatcher struct {
	mv       *model
	idle     time.Duration
	slots    int // per instance
	controls []seqControl
	// oldest is the oldest strategy: a batch is the oldest next requests
	// of the lane's candidate sequences, sent by rule (preferred sizes and
	// queue delay). Otherwise direct: batch position i is slot i, padded
	// with not-ready filler requests, and sent once minSlots of the slots
	// have a request or the oldest of them waited delay.
	oldest   bool
	rule     batchRule
	delay    time.Duration // direct's max_queue_delay_microseconds
	minSlots float32       // direct's minimum_slot_utilization
	// iterative is iterative_sequence: the model may reschedule requests.
	iterative bool
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
	lastID   uint64            // the last correlation id the batcher picked

	stopc chan struct{}
	wg    sync.WaitGroup
}

// sequence is one live correlation id.
type sequence struct {
	key     seqKey
	lane    *lane // nil while in the backlog
	slot    int
	proc    *stubproc.Proc // the stub that holds its state, once known
	queue   []*stubproc.Request
	running *stubproc.Request // the request the instance has, nil when none
	last    time.Time
	ended   bool // its END request arrived; it leaves once drained
}

// lane is one instance's slots.
type lane struct {
	inst        Instance
	slots       []*sequence
	outstanding int         // batches handed to the instance and not yet ended
	timer       *time.Timer // pumps the lane when a held batch's delay ends
}

// How many ended sequences the batcher remembers, to explain a request
// for one of them.
const tombstones = 4096

func newSequenceBatcher(mv *model, sb *inferencepb.ModelSequenceBatching) (*sequenceBatcher, error) {
	if len(sb.GetState()) > 0 {
		return nil, backendapi.Errorf(backendapi.Unsupported, "model '%s': implicit sequence state (sequence_batching.state) is not supported; keep the state in the model", mv.name)
	}
	s := &sequenceBatcher{
		mv:        mv,
		idle:      time.Duration(sb.GetMaxSequenceIdleMicroseconds()) * time.Microsecond,
		seqs:      map[seqKey]*sequence{},
		tomb:      map[seqKey]string{},
		stopc:     make(chan struct{}),
		iterative: sb.GetIterativeSequence(),
	}
	if s.idle <= 0 {
		s.idle = time.Second
	}
	s.slots = max(int(mv.maxBatch), 1)
	if old := sb.GetOldest(); old != nil {
		s.oldest = true
		s.rule = newBatchRule(mv.maxBatch, old.GetPreferredBatchSize(), old.GetMaxQueueDelayMicroseconds())
		if old.GetMaxCandidateSequences() > 0 {
			s.slots = int(old.GetMaxCandidateSequences())
		}
	} else {
		s.delay = time.Duration(sb.GetDirect().GetMaxQueueDelayMicroseconds()) * time.Microsecond
		s.minSlots = sb.GetDirect().GetMinimumSlotUtilization()
	}
	s.ctrlShape = []int64{1}
	if mv.maxBatch > 0 {
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

// enqueue checks the request's place in its sequence, adds the control
// inputs and queues it behind the sequence's earlier requests.
func (s *sequenceBatcher) Enqueue(pr *stubproc.Request) error {
	req := pr.Req()
	m := s.mv.name
	if req.CorrelationID.IsZero() && !s.iterative {
		return backendapi.Errorf(backendapi.InvalidArg, "inference request to model '%s' must specify a non-zero or non-empty correlation ID", m)
	}
	if s.mv.maxBatch > 0 && pr.Size() != 1 {
		return backendapi.Errorf(backendapi.InvalidArg, "inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher", m)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return backendapi.Errorf(backendapi.Unavailable, "model '%s' version %d is being unloaded", m, s.mv.version)
	}
	nr := *req
	if nr.CorrelationID.IsZero() {
		nr.CorrelationID, nr.Flags = s.newID(), nr.Flags|backendapi.FlagSequenceStart
	}
	key := keyOf(nr.CorrelationID)
	start := nr.Flags&backendapi.FlagSequenceStart != 0
	end := nr.Flags&backendapi.FlagSequenceEnd != 0
	inputs, err := s.controlInputs(nr.CorrelationID, start, end, true)
	if err != nil {
		return err
	}
	nr.Inputs = append(append(make([]backendapi.InputTensor, 0, len(req.Inputs)+len(inputs)), req.Inputs...), inputs...)
	for i := range req.Inputs {
		// Fillers copy the shapes of queued requests whose callers may
		// have left (and reused their requests) by then.
		nr.Inputs[i].Shape = slices.Clone(req.Inputs[i].Shape)
	}
	pr.SetReq(&nr)
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
		s.end(seq, "the sequence ended with an earlier request that had the END flag")
	}
	if seq.lane != nil {
		s.pump(seq.lane)
	}
	return nil
}

// end stops seq from taking requests: later ones for its id are refused,
// saying why, and it leaves its slot once its queue drains. Called with
// s.mu held.
func (s *sequenceBatcher) end(seq *sequence, why string) {
	seq.ended = true
	if s.seqs[seq.key] == seq {
		delete(s.seqs, seq.key)
		s.bury(seq.key, why)
	}
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
		if best == nil || (l.inst.Ready() && !best.inst.Ready()) || (l.inst.Ready() == best.inst.Ready() && used < bestUsed) {
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

// pump hands the lane's instance batches while it has room. A batch the
// strategy holds back for more requests is pumped again when its delay
// ends. Called with s.mu held.
func (s *sequenceBatcher) pump(l *lane) {
	for l.outstanding < s.mv.pipelineDepth {
		cur := l.inst.Proc()
		var heads []*sequence
		for _, seq := range l.slots {
			if seq == nil || seq.running != nil || len(seq.queue) == 0 {
				continue
			}
			if seq.proc != nil && (seq.proc != cur || !cur.Alive()) {
				s.lose(seq)
				continue
			}
			heads = append(heads, seq)
		}
		if len(heads) == 0 {
			return
		}
		members, wake := s.choose(heads, time.Now())
		if len(members) == 0 {
			if l.timer == nil {
				l.timer = time.AfterFunc(time.Until(wake), func() {
					s.mu.Lock()
					defer s.mu.Unlock()
					if !s.stopped {
						s.pump(l)
					}
				})
			} else {
				l.timer.Reset(time.Until(wake))
			}
			return
		}
		items := s.batchOf(members)
		for _, seq := range members {
			if seq.proc == nil {
				seq.proc = cur
			}
			seq.running = seq.queue[0]
			seq.queue = seq.queue[1:]
		}
		l.outstanding++
		b := &stubproc.Batch{Items: items}
		var handedBack chan *stubproc.Request
		if s.iterative {
			handedBack = make(chan *stubproc.Request, len(items))
			b.Requeue = func(pr *stubproc.Request) { s.requeue(members, handedBack, pr) }
		}
		// direct holds at most mv.pipelineDepth of this lane's batches, far
		// below its capacity, so the send does not block.
		l.inst.Direct() <- b
		s.wg.Add(1)
		go s.await(l, items, handedBack, members)
	}
}

// choose picks the sequences whose next requests form the lane's next
// batch, from those that have one ready (heads, in slot order), or none
// and the time to look again.
func (s *sequenceBatcher) choose(heads []*sequence, now time.Time) ([]*sequence, time.Time) {
	if s.oldest {
		heads = slices.Clone(heads)
		slices.SortStableFunc(heads, func(a, b *sequence) int { return a.queue[0].Queued().Compare(b.queue[0].Queued()) })
		full := int64(len(heads)) > s.rule.limit
		heads = heads[:min(int64(len(heads)), s.rule.limit)]
		items := make([]*stubproc.Request, len(heads))
		sizes := make([]int64, len(heads))
		for i, seq := range heads {
			items[i], sizes[i] = seq.queue[0], 1
		}
		n, wake := s.rule.cut(items, sizes, full, now)
		return heads[:n], wake
	}
	if s.delay == 0 || s.minSlots == 0 || float32(len(heads))/float32(s.slots) >= s.minSlots {
		return heads, time.Time{}
	}
	oldest := heads[0].queue[0].Queued()
	for _, seq := range heads[1:] {
		if q := seq.queue[0].Queued(); q.Before(oldest) {
			oldest = q
		}
	}
	if wake := oldest.Add(s.delay); now.Before(wake) {
		return nil, wake
	}
	return heads, time.Time{}
}

// batchOf lists the next requests of members (in slot order for direct).
// Under direct, a batch's position i is slot i, as the model may keep
// per-slot state: a slot with no request up to the last one used gets a
// filler whose READY control is false.
func (s *sequenceBatcher) batchOf(members []*sequence) []*stubproc.Request {
	if s.oldest {
		items := make([]*stubproc.Request, len(members))
		for i, seq := range members {
			items[i] = seq.queue[0]
		}
		return items
	}
	items := make([]*stubproc.Request, 0, members[len(members)-1].slot+1)
	for _, seq := range members {
		for len(items) < seq.slot {
			items = append(items, s.filler(members[0].queue[0]))
		}
		items = append(items, seq.queue[0])
	}
	return items
}

// filler is a not-ready request shaped like like: its inputs zeroed, its
// controls all false and a zero correlation id. Its responses are dropped.
func (s *sequenceBatcher) filler(like *stubproc.Request) *stubproc.Request {
	ctrl, _ := s.controlInputs(backendapi.CorrelationID{}, false, false, false)
	req := &backendapi.InferRequest{ModelName: like.Req().ModelName, ModelVersion: like.Req().ModelVersion}
	for _, in := range like.Req().Inputs {
		if slices.ContainsFunc(ctrl, func(c backendapi.InputTensor) bool { return c.Name == in.Name }) {
			continue
		}
		size := in.DataType.Size()
		if in.DataType == backendapi.TypeBytes {
			size = 4 // zero-length elements
		}
		zero := make([]byte, elementCount(in.Shape)*int64(size))
		req.Inputs = append(req.Inputs, backendapi.InputTensor{Name: in.Name, DataType: in.DataType, Shape: in.Shape, Data: zero})
	}
	req.Inputs = append(req.Inputs, ctrl...)
	return stubproc.NewFiller(req)
}

// lose ends a sequence whose stub died: its state is gone, so its waiting
// requests fail and later ones are refused. Called with s.mu held.
func (s *sequenceBatcher) lose(seq *sequence) {
	why := fmt.Sprintf("the stub process of instance '%s' that held the sequence's state died", seq.lane.inst.Name())
	err := backendapi.Errorf(backendapi.Unavailable, "inference request for sequence %s to model '%s' cannot continue: %s; start the sequence again with the START flag", seq.key, s.mv.name, why)
	for _, pr := range seq.queue {
		go s.mv.finish(pr, nil, err, true)
	}
	seq.queue = nil
	s.end(seq, why)
	if seq.running == nil {
		s.release(seq)
	}
}

// requeue puts a request the model handed back at the head of its
// sequence, to run again once the batch it came in has settled, and tells
// that batch's await. Called by the stub process that ran it.
func (s *sequenceBatcher) requeue(members []*sequence, handedBack chan<- *stubproc.Request, pr *stubproc.Request) {
	s.mu.Lock()
	i := slices.IndexFunc(members, func(seq *sequence) bool { return seq.running == pr })
	if s.stopped || i < 0 { // i < 0: not a request of this batch's sequences (a filler)
		s.mu.Unlock()
		s.mv.finish(pr, nil, s.unloaded(), true)
		return
	}
	defer s.mu.Unlock()
	// As in Triton, the request runs on as neither the start nor the end
	// of its sequence. pr.Req() is the batcher's own copy (enqueue).
	pr.Req().Flags &^= backendapi.FlagSequenceStart | backendapi.FlagSequenceEnd
	ctrl, _ := s.controlInputs(pr.Req().CorrelationID, false, false, true) // the id encoded before
	copy(pr.Req().Inputs[len(pr.Req().Inputs)-len(ctrl):], ctrl)
	members[i].queue = slices.Insert(members[i].queue, 0, pr)
	handedBack <- pr // buffered for every request of the batch
}

func (s *sequenceBatcher) unloaded() error { return s.mv.unloaded() }

// FailQueued fails the batches in the model queue. A sequence's requests
// wait for their stub (its state is there), in the batcher or in their
// instance's direct queue, until it returns or the sequence ends.
func (s *sequenceBatcher) FailQueued(err error) { s.mv.drainQueue(err) }

// Ready implements Scheduler.
func (s *sequenceBatcher) Ready() bool { return s.mv.ready() }

// await waits until each request of a batch ended or was handed back
// (requeue), then lets each sequence send its next request. An iterative
// sequence whose request ended is over.
func (s *sequenceBatcher) await(l *lane, items []*stubproc.Request, handedBack <-chan *stubproc.Request, members []*sequence) {
	defer s.wg.Done()
	var back []*stubproc.Request
settle:
	for _, pr := range items {
		for !slices.Contains(back, pr) {
			select {
			case <-pr.Done():
				continue settle
			case h := <-handedBack:
				back = append(back, h)
			case <-s.stopc:
				return
			}
		}
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	l.outstanding--
	for _, seq := range members {
		if s.iterative && !slices.Contains(back, seq.running) {
			s.end(seq, "its request completed, which ends an iterative sequence")
		}
		seq.running = nil
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
				if seq.running != nil || len(seq.queue) > 0 {
					continue
				}
				if seq.lane != nil && seq.proc != nil && (seq.proc != seq.lane.inst.Proc() || !seq.proc.Alive()) {
					s.lose(seq)
					continue
				}
				if now.Sub(seq.last) > s.idle {
					s.mv.log.Info("sequence reclaimed after being idle", "model", s.mv.name, "sequence", seq.key.String(), "idle", s.idle)
					s.end(seq, fmt.Sprintf("the sequence was reclaimed after being idle for longer than max_sequence_idle_microseconds (%d)", s.idle.Microseconds()))
					s.release(seq)
				}
			}
			s.mu.Unlock()
		}
	}
}

// Stop ends the batcher: waiting requests fail, as the model is going
// away, and so do batches its instances have not taken yet.
func (s *sequenceBatcher) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	for _, l := range s.lanes {
		if l.timer != nil {
			l.timer.Stop()
		}
	}
	var waiting []*stubproc.Request
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
	err := s.unloaded()
	for _, pr := range waiting {
		s.mv.finish(pr, nil, err, true)
	}
	for _, inst := range s.mv.instances {
		for {
			select {
			case b := <-inst.Direct():
				for _, pr := range b.Items {
					s.mv.finish(pr, nil, err, true)
				}
				continue
			default:
			}
			break
		}
	}
}
