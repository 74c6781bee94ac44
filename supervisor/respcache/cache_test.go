package respcache

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
)

func baseRequest() *backendapi.InferRequest {
	return &backendapi.InferRequest{
		ModelName: "m",
		Inputs: []backendapi.InputTensor{
			{Name: "INPUT0", DataType: backendapi.TypeInt32, Shape: []int64{1, 2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0}},
		},
		Parameters: map[string]any{"p": "x"},
	}
}

func mustKey(t *testing.T, req *backendapi.InferRequest, version int64, shm Source) Key {
	t.Helper()
	k, err := KeyOf(req, version, shm)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyOf(t *testing.T) {
	base := mustKey(t, baseRequest(), 1, nil)
	same := []struct {
		name string
		edit func(r *backendapi.InferRequest)
	}{
		{"request id", func(r *backendapi.InferRequest) { r.ID = "other" }},
		{"priority", func(r *backendapi.InferRequest) { r.Priority = 3 }},
		{"requested version 0 resolved to the same", func(r *backendapi.InferRequest) { r.ModelVersion = 0 }},
	}
	for _, c := range same {
		t.Run("same: "+c.name, func(t *testing.T) {
			r := baseRequest()
			c.edit(r)
			if mustKey(t, r, 1, nil) != base {
				t.Error("key changed")
			}
		})
	}
	differ := []struct {
		name    string
		version int64
		edit    func(r *backendapi.InferRequest)
	}{
		{"model", 1, func(r *backendapi.InferRequest) { r.ModelName = "n" }},
		{"version", 2, func(r *backendapi.InferRequest) {}},
		{"input name", 1, func(r *backendapi.InferRequest) { r.Inputs[0].Name = "INPUT1" }},
		{"input type", 1, func(r *backendapi.InferRequest) { r.Inputs[0].DataType = backendapi.TypeUint32 }},
		{"input shape", 1, func(r *backendapi.InferRequest) { r.Inputs[0].Shape = []int64{2, 1} }},
		{"input bytes", 1, func(r *backendapi.InferRequest) { r.Inputs[0].Data = []byte{1, 0, 0, 0, 3, 0, 0, 0} }},
		{"another input", 1, func(r *backendapi.InferRequest) {
			r.Inputs = append(r.Inputs, backendapi.InputTensor{Name: "INPUT1", DataType: backendapi.TypeInt32, Shape: []int64{0}})
		}},
		{"parameter value", 1, func(r *backendapi.InferRequest) { r.Parameters["p"] = "y" }},
		{"parameter type", 1, func(r *backendapi.InferRequest) { r.Parameters = map[string]any{"p": int64(1)} }},
		{"parameter name", 1, func(r *backendapi.InferRequest) { r.Parameters = map[string]any{"q": "x"} }},
		{"no parameters", 1, func(r *backendapi.InferRequest) { r.Parameters = nil }},
		{"requested output", 1, func(r *backendapi.InferRequest) { r.Outputs = []backendapi.RequestedOutput{{Name: "OUTPUT0"}} }},
		{"classification", 1, func(r *backendapi.InferRequest) {
			r.Outputs = []backendapi.RequestedOutput{{Name: "OUTPUT0", Classification: 2}}
		}},
		// The name and its data must not run together.
		{"bytes moved into the name", 1, func(r *backendapi.InferRequest) {
			r.Inputs[0].Name = "INPUT0\x08\x00\x00\x00\x00\x00\x00\x00"
			r.Inputs[0].Data = r.Inputs[0].Data[:4]
		}},
	}
	for _, c := range differ {
		t.Run("differs: "+c.name, func(t *testing.T) {
			r := baseRequest()
			c.edit(r)
			if mustKey(t, r, c.version, nil) == base {
				t.Error("same key")
			}
		})
	}
}

func TestKeyOfSharedMemory(t *testing.T) {
	region := map[string][]byte{"r": {9, 9, 1, 0, 0, 0, 2, 0, 0, 0}}
	src := func(in *backendapi.InputTensor) ([]byte, error) {
		b, ok := region[in.SharedMemory.Region]
		if !ok {
			return nil, errors.New("no such region")
		}
		return b[in.SharedMemory.Offset : in.SharedMemory.Offset+in.SharedMemory.ByteSize], nil
	}
	inShm := baseRequest()
	inShm.Inputs[0].Data = nil
	inShm.Inputs[0].SharedMemory = &backendapi.SharedMemoryRef{Region: "r", Offset: 2, ByteSize: 8}
	// The bytes count, not where they are.
	if mustKey(t, inShm, 1, src) != mustKey(t, baseRequest(), 1, nil) {
		t.Error("an input in shared memory keys differently from the same bytes in the request")
	}
	region["r"][6] = 7
	if mustKey(t, inShm, 1, src) == mustKey(t, baseRequest(), 1, nil) {
		t.Error("changed shared-memory bytes keep the key")
	}
	if _, err := KeyOf(inShm, 1, nil); err == nil {
		t.Error("no source: no error")
	}
	inShm.Inputs[0].SharedMemory.Region = "gone"
	if _, err := KeyOf(inShm, 1, src); err == nil {
		t.Error("source error: no error")
	}
}

func response(n int) *backendapi.InferResponse {
	return &backendapi.InferResponse{ModelName: "m", ModelVersion: 1, ID: "orig",
		Outputs: []backendapi.OutputTensor{{Name: "O", DataType: backendapi.TypeUint8, Shape: []int64{int64(n)}, Data: make([]byte, n)}}}
}

func key(i int) Key {
	var k Key
	copy(k[:], fmt.Sprint(i))
	return k
}

func TestCacheLRU(t *testing.T) {
	one := entryOverhead + size(response(100))
	c := New(3 * one)
	for i := 0; i < 3; i++ {
		if !c.Insert("m", 1, key(i), response(100)) {
			t.Fatalf("insert %d refused", i)
		}
	}
	if _, ok := c.Lookup("m", 1, key(0)); !ok { // 0 is now the most recent
		t.Fatal("miss on 0")
	}
	c.Insert("m", 1, key(3), response(100)) // evicts 1, the least recently used
	for i, want := range []bool{true, false, true, true} {
		if _, ok := c.Lookup("m", 1, key(i)); ok != want {
			t.Errorf("entry %d present %v, want %v", i, ok, want)
		}
	}
	s := c.Stats()
	if s.Entries != 3 || s.Bytes != 3*one || s.Evictions != 1 || s.Util() != 1 {
		t.Errorf("stats %+v", s)
	}
	if c.Insert("m", 1, key(9), response(int(3*one))) {
		t.Error("a response over the limit was kept")
	}
	if c.Stats().Entries != 3 {
		t.Error("the refused response evicted entries")
	}
	shm := response(4)
	shm.Outputs[0].Data, shm.Outputs[0].SharedMemory = nil, &backendapi.SharedMemoryRef{Region: "r", ByteSize: 4}
	if c.Insert("m", 1, key(10), shm) {
		t.Error("a response with an output in client shared memory was kept")
	}
}

func TestCacheCopies(t *testing.T) {
	c := New(1 << 20)
	r := response(4)
	r.Outputs[0].Data[0] = 5
	r.Parameters = map[string]any{"a": "b"}
	c.Insert("m", 1, key(1), r)
	r.Outputs[0].Data[0] = 6 // the stub reuses its memory
	r.Parameters["a"] = "c"
	got, ok := c.Lookup("m", 1, key(1))
	if !ok || got.Outputs[0].Data[0] != 5 || got.Parameters["a"] != "b" {
		t.Fatalf("cached response %+v changed with the original", got)
	}
	got.ID = "req-2"
	again, _ := c.Lookup("m", 1, key(1))
	if again.ID == "req-2" {
		t.Error("setting a hit's ID changed the cached response")
	}
}

func TestCacheStats(t *testing.T) {
	c := New(1 << 20)
	c.Lookup("m", 1, key(1))
	c.Insert("m", 1, key(1), response(1))
	c.Lookup("m", 1, key(1))
	c.Lookup("m", 1, key(1))
	c.Lookup("m", 2, key(2))
	m1, m2 := c.ModelStats("m", 1), c.ModelStats("m", 2)
	if m1.Hits != 2 || m1.Misses != 1 || m1.HitTime <= 0 || m1.MissTime <= 0 {
		t.Errorf("m v1 %+v", m1)
	}
	if m2.Hits != 0 || m2.Misses != 1 {
		t.Errorf("m v2 %+v", m2)
	}
	if s := c.Stats(); s.Lookups != 4 || s.Hits != 2 || s.Misses != 2 || s.InsertTime <= 0 || s.LookupTime <= 0 {
		t.Errorf("totals %+v", s)
	}
	if (c.ModelStats("other", 1) != ModelStats{}) {
		t.Error("a model never looked up has counts")
	}
}

func TestCacheConcurrent(t *testing.T) {
	c := New(20 * (entryOverhead + size(response(10))))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				k := key((g*7 + i) % 50)
				if _, ok := c.Lookup("m", 1, k); !ok {
					c.Insert("m", 1, k, response(10))
				}
			}
		}(g)
	}
	wg.Wait()
	s := c.Stats()
	if s.Entries > 20 || s.Bytes > s.Limit || s.Lookups != 8*500 || s.Hits+s.Misses != s.Lookups {
		t.Errorf("stats %+v", s)
	}
}
