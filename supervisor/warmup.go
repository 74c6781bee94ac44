package supervisor

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
	"github.com/stubvisor/stubvisor/supervisor/signature"
	"github.com/stubvisor/stubvisor/supervisor/stubproc"
)

// Warmup, as Triton runs model_warmup: every sample, count times, on every
// instance before the model is READY, with zero, random or file data
// (the model's warmup/ directory). A failure fails the load with Triton's
// text. Beyond Triton, which never restarts a stub, a restarted stub is
// warmed up again before it takes traffic: an instance counts as ready
// only once launch, and with it the warmup, returned. Warmup requests count
// in the model's statistics and metrics as in Triton, whose backends report
// them like any other request: a restarted stub's warmup counts too.

// warmup runs the model's warmup samples on p, which takes no other
// request yet. It returns how long they took.
func (inst *instance) warmup(p *stubproc.Proc) (time.Duration, error) {
	mv := inst.mv
	samples := mv.cfg.GetModelWarmup()
	if len(samples) == 0 {
		return 0, nil
	}
	start := time.Now()
	for _, w := range samples {
		req, err := mv.warmupRequest(w)
		if err != nil {
			return 0, backendapi.Errorf(backendapi.InvalidArg, "failed to run warmup sample '%s': %s", w.GetName(), backendapi.MessageOf(err))
		}
		for i := 1; i <= int(max(w.GetCount(), 1)); i++ {
			inst.log.Debug(fmt.Sprintf("model '%s' instance %s is running warmup sample '%s' for iteration %d", mv.name, inst.name, w.GetName(), i))
			if err := inst.warmupOnce(p, req, int(max(w.GetBatchSize(), 1))); err != nil {
				// Triton's text: each response error followed by "; ".
				return 0, backendapi.Errorf(backendapi.CodeOf(err), "failed to run warmup sample '%s': %s; ", w.GetName(), backendapi.MessageOf(err))
			}
		}
	}
	return time.Since(start), nil
}

// warmupOnce executes one iteration of a sample on p, as Triton does: n
// requests (the sample's batch_size) of batch size 1, in one execution,
// and waits for their ends (for a decoupled model, the final responses).
func (inst *instance) warmupOnce(p *stubproc.Proc, req *backendapi.InferRequest, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), inst.mv.sup.opts.InitializeTimeout)
	defer cancel()
	var mu sync.Mutex
	var streamErr error
	var stream func(*backendapi.InferResponse, error, bool)
	if inst.mv.decoupled {
		stream = func(_ *backendapi.InferResponse, err error, _ bool) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && streamErr == nil {
				streamErr = err
			}
		}
	}
	release, err := inst.warmupGrant(ctx, p)
	if err != nil {
		return err
	}
	defer release()
	batch := &stubproc.Batch{Items: make([]*stubproc.Request, n)}
	for i := range batch.Items {
		pr := stubproc.NewRequest(ctx, req, 1, stream, false)
		inst.warmups.Store(pr, struct{}{})
		defer inst.warmups.Delete(pr)
		batch.Items[i] = pr
	}
	if !p.TakeSlot() {
		return backendapi.Errorf(backendapi.Internal, "stub of instance %s has no free slot", inst.name)
	}
	inst.warmExecs.Add(1)
	p.Execute(batch)
	var first error
	for _, pr := range batch.Items {
		resp, err := pr.Wait()
		resp.Release()
		if err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	mu.Lock()
	defer mu.Unlock()
	return streamErr
}

// warmupRequest builds the request of one sample, of batch size 1 (no
// batch dimension for a model without batching).
func (mv *modelVersion) warmupRequest(w *inferencepb.ModelWarmup) (*backendapi.InferRequest, error) {
	req := &backendapi.InferRequest{ModelName: mv.name, ModelVersion: mv.version, ID: "warmup:" + w.GetName()}
	names := make([]string, 0, len(w.GetInputs()))
	for name := range w.GetInputs() {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		in := w.GetInputs()[name]
		dt := signature.ConfigType(in.GetDataType())
		shape := in.GetDims()
		if mv.sig.MaxBatch() > 0 {
			shape = append([]int64{1}, shape...)
		}
		data, err := mv.warmupData(in, dt, signature.ElementCount(shape))
		if err != nil {
			return nil, fmt.Errorf("input '%s': %w", name, err)
		}
		req.Inputs = append(req.Inputs, backendapi.InputTensor{Name: name, DataType: dt, Shape: shape, Data: data})
	}
	return req, nil
}

// warmupData is the bytes of n elements of one warmup input.
func (mv *modelVersion) warmupData(in *inferencepb.ModelWarmup_Input, dt backendapi.DataType, n int64) ([]byte, error) {
	switch {
	case in.GetInputDataFile() != "":
		file := filepath.Join(mv.dir, "warmup", in.GetInputDataFile())
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("input_data_file: %w", err)
		}
		if dt == backendapi.TypeBytes {
			return repeatStrings(b, n)
		}
		want := n * int64(dt.Size())
		if int64(len(b)) < want {
			return nil, fmt.Errorf("input_data_file %s holds %d bytes, the input needs %d", file, len(b), want)
		}
		return b[:want], nil
	case dt == backendapi.TypeBytes:
		// Zero data is empty strings; random data short random strings.
		var out []byte
		for i := int64(0); i < n; i++ {
			s := ""
			if in.GetRandomData() {
				s = fmt.Sprintf("%x", rand.Uint64())
			}
			out = binary.LittleEndian.AppendUint32(out, uint32(len(s)))
			out = append(out, s...)
		}
		return out, nil
	}
	b := make([]byte, n*int64(dt.Size()))
	if in.GetRandomData() {
		for i := range b {
			b[i] = byte(rand.IntN(256))
		}
		if dt == backendapi.TypeBool {
			for i := range b {
				b[i] &= 1
			}
		}
	}
	return b, nil
}

// repeatStrings takes n elements from a serialized BYTES file, starting
// over at its end, as a file holds one sample for one batch element.
func repeatStrings(file []byte, n int64) ([]byte, error) {
	var elems [][]byte
	for rest := file; len(rest) > 0; {
		if len(rest) < 4 || int(binary.LittleEndian.Uint32(rest)) > len(rest)-4 {
			return nil, fmt.Errorf("input_data_file is not a serialized BYTES tensor (4-byte length, then the bytes)")
		}
		l := int(binary.LittleEndian.Uint32(rest))
		elems, rest = append(elems, rest[:4+l]), rest[4+l:]
	}
	if len(elems) == 0 {
		return nil, fmt.Errorf("input_data_file holds no element")
	}
	var out []byte
	for i := int64(0); i < n; i++ {
		out = append(out, elems[i%int64(len(elems))]...)
	}
	return out, nil
}
