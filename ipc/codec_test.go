package ipc

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCodecRoundTrip(t *testing.T) {
	enc := NewEncoder()
	dec := NewDecoder()
	for _, m := range sampleMessages() {
		t.Run(reflect.TypeOf(m).Elem().Name(), func(t *testing.T) {
			b, err := enc.Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dec.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind() != m.Kind() {
				t.Fatalf("kind %d, want %d", got.Kind(), m.Kind())
			}
			again, err := enc.Encode(got)
			if err != nil {
				t.Fatal(err)
			}
			if got2, _ := dec.Decode(again); !reflect.DeepEqual(got, got2) {
				t.Fatalf("second round trip differs:\n%#v\n%#v", got, got2)
			}
		})
	}
}

func TestInlineTensor(t *testing.T) {
	enc, dec := NewEncoder(), NewDecoder()
	small := Tensor{Name: "OUT", DataType: 11, Shape: []int64{2}, Loc: LocInline, Size: 8, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}}
	b, err := enc.Encode(&ResponseMsg{Response: Response{Handle: 1, Flags: FlagFinal, Outputs: []Tensor{small}}})
	if err != nil {
		t.Fatal(err)
	}
	frame := append([]byte{}, b...)
	m, err := dec.Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	got := m.(*ResponseMsg).Response.Outputs[0]
	clear(frame) // the ring reuses a frame once it is consumed
	if !reflect.DeepEqual(got, small) {
		t.Fatalf("decoded %+v, want %+v (the bytes must be copied out of the frame)", got, small)
	}
	lying := small
	lying.Size = 9
	b, err = enc.Encode(&ResponseMsg{Response: Response{Handle: 1, Outputs: []Tensor{lying}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dec.Decode(b); !errors.Is(err, ErrProtocol) {
		t.Fatalf("an inline tensor whose size is not its byte count decoded: %v", err)
	}
}

func TestCodecFields(t *testing.T) {
	msgs := sampleMessages()
	got := normalized(t, msgs[1]).(*ExecuteMsg)
	want := msgs[1].(*ExecuteMsg)
	r := got.Requests[0]
	if r.Handle != want.Requests[0].Handle || r.CorrelationID != "seq-α" || r.Flags != 3 ||
		r.Inputs[0].Shape[2] != 1<<40 || r.Inputs[0].Shape[0] != -1 || r.Inputs[0].Offset != 1<<33 ||
		r.Inputs[1].Loc != LocNone || r.TimeoutMicros != 1500 || r.ParametersJSON != `{"k":1}` {
		t.Fatalf("request decoded as %+v", r)
	}
	if got.Requests[1].CorrelationID != uint64(42) {
		t.Fatalf("numeric correlation id decoded as %#v", got.Requests[1].CorrelationID)
	}
	init := normalized(t, msgs[0]).(*InitializeMsg)
	opts := map[string]any{"decoupled": true, "model_file": "/m/1/model.py", "n": int64(-5), "big": uint64(1 << 63), "f": 1.5, "list": []any{int64(1), "x", nil}}
	if !reflect.DeepEqual(init.Options, opts) || init.Args["model_name"] != "add_sub" {
		t.Fatalf("initialize decoded as %+v", init)
	}
}

// Frames as the Python stub writes them (msgpack 1.0 packb of lists):
// they must decode into the typed structs.
func TestDecodePythonFrames(t *testing.T) {
	cases := []struct {
		name string
		hex  []byte
		want Message
	}{
		// [64, 0, 1, 4242, {"python": "3.11"}]
		{"hello", []byte{0x95, 0x40, 0x00, 0x01, 0xcd, 0x10, 0x92, 0x81, 0xa6, 'p', 'y', 't', 'h', 'o', 'n', 0xa4, '3', '.', '1', '1'},
			&HelloMsg{Version: 1, PID: 4242, Info: map[string]string{"python": "3.11"}}},
		// [65, 7, None, True]
		{"result bool", []byte{0x94, 0x41, 0x07, 0xc0, 0xc3}, &ResultMsg{ID: 7, Value: true}},
		// [65, 8, [13, b"x"], None]: a bin where a str is expected
		{"result error as bin", []byte{0x94, 0x41, 0x08, 0x92, 0x0d, 0xc4, 0x01, 'x', 0xc0}, &ResultMsg{ID: 8, Error: &Error{Code: 13, Message: "x"}}},
		// [70, 0, [64, 128], "a future element"]
		{"free with trailing element", []byte{0x94, 0x46, 0x00, 0x92, 0x40, 0xcc, 0x80, 0xa1, 'z'}, &FreeMsg{Offsets: []uint64{64, 128}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.hex)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"not an array", []byte{0x01}},
		{"one element", []byte{0x91, 0x03}},
		{"unknown kind", []byte{0x92, 0x09, 0x00}},
		{"kind too large", []byte{0x92, 0xcd, 0x01, 0x00, 0x00}},
		{"negative id", []byte{0x92, 0x03, 0xff}},
		{"missing elements", []byte{0x92, 0x02, 0x01}},
		{"array longer than the frame", []byte{0x93, 0x02, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"map longer than the frame", []byte{0x94, 0x01, 0x01, 0xdf, 0x7f, 0xff, 0xff, 0xff, 0xc0}},
		{"string longer than the frame", []byte{0x96, 0x44, 0x00, 0xdb, 0x00, 0x10, 0x00, 0x00, 'a'}},
		{"trailing bytes", []byte{0x92, 0x03, 0x01, 0xc0}},
		{"float for an int", []byte{0x92, 0x03, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"deep nesting", append([]byte{0x94, 0x41, 0x01, 0xc0}, deepArray(100)...)},
		{"truncated tensor", []byte{0x93, 0x42, 0x00, 0x95, 0x01, 0x01, 0xc0, 0x91, 0x93, 0xa1, 'x', 0x0b}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.b)
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("got %#v, %v; want ErrProtocol", m, err)
			}
		})
	}
}

func deepArray(depth int) []byte {
	b := make([]byte, 0, depth+1)
	for range depth {
		b = append(b, 0x91)
	}
	return append(b, 0xc0)
}

func TestEncodeRejects(t *testing.T) {
	cases := []struct {
		name string
		m    Message
	}{
		{"nil", nil},
		{"float correlation id", &ExecuteMsg{Requests: []Request{{CorrelationID: 1.5}}}},
		{"unencodable value", &ResultMsg{Value: make(chan int)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewEncoder().Encode(tc.m); err == nil {
				t.Fatal("encoded")
			}
		})
	}
}

// FuzzDecode feeds arbitrary frames to the decoder: it must never panic,
// and whatever it accepts must survive a re-encode unchanged (compared as
// bytes, which the encoder makes canonical: sorted map keys, and NaN
// equal to itself).
func FuzzDecode(f *testing.F) {
	enc := NewEncoder()
	for _, m := range sampleMessages() {
		b, err := enc.Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte(nil), b...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		again, err := NewEncoder().Encode(m)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", m, err)
		}
		again = bytes.Clone(again)
		m2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoding of %#v does not decode: %v", m, err)
		}
		third, err := NewEncoder().Encode(m2)
		if err != nil {
			t.Fatal(err)
		}
		if m2.Kind() != m.Kind() || !bytes.Equal(again, third) {
			t.Fatalf("unstable round trip:\n%#v\n%#v", m, m2)
		}
	})
}

func BenchmarkEncodeExecute(b *testing.B) {
	m := sampleMessages()[1]
	enc := NewEncoder()
	b.ReportAllocs()
	for b.Loop() {
		enc.Encode(m)
	}
}

func BenchmarkDecodeExecuteDone(b *testing.B) {
	buf, _ := NewEncoder().Encode(sampleMessages()[12])
	dec := NewDecoder()
	b.ReportAllocs()
	for b.Loop() {
		dec.Decode(buf)
	}
}

// BenchmarkRoundTrip is one Execute/ExecuteDone exchange between two Conns
// of one process (the stub side echoes on another goroutine): the CPU
// cost of the wire without a second process.
func BenchmarkRoundTrip(b *testing.B) {
	sup, err := Create("bench", DefaultSettings())
	if err != nil {
		b.Fatal(err)
	}
	defer sup.Close()
	fd, err := unix.FcntlInt(sup.File().Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	stub, err := Attach(os.NewFile(uintptr(fd), "dup"))
	if err != nil {
		b.Fatal(err)
	}
	defer stub.Close()
	go func() {
		done := &ExecuteDoneMsg{Responses: []Response{{Flags: FlagFinal}}}
		for {
			m, err := stub.Recv(time.Time{})
			if err != nil {
				return
			}
			e := m.(*ExecuteMsg)
			done.BatchID = e.BatchID
			done.Responses[0].Outputs = e.Requests[0].Inputs
			if stub.Send(done) != nil {
				return
			}
		}
	}()
	msg := &ExecuteMsg{Requests: []Request{{Inputs: []Tensor{{Name: "INPUT0", DataType: 11, Shape: []int64{16}, Size: 64}}}}}
	b.ReportAllocs()
	for b.Loop() {
		msg.BatchID++
		if err := sup.Send(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := sup.Recv(time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}
