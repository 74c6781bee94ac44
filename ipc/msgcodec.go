package ipc

import (
	"fmt"
	"math"
)

// msgCodec is one message kind's encoding and decoding, written side by
// side so that they change together. Every message is an array [kind, id,
// fields...]; id is the call, batch or handle the kind documents, 0 when
// it has none.
type msgCodec struct {
	// min is the fewest elements a frame of this kind has.
	min int
	// enc appends the whole message: its head (appendHead) and fields.
	enc func(e *encoder, b []byte, m Message) ([]byte, error)
	// dec reads the fields of a frame of n elements (n >= min) after its
	// kind and id, and returns how many elements it read; decode skips the
	// rest, which a newer peer may have added.
	dec func(r *reader, id uint64, n int) (Message, int, error)
}

// codec builds a msgCodec from functions over the concrete message type.
func codec[T Message](min int, enc func(e *encoder, b []byte, m T) ([]byte, error), dec func(r *reader, id uint64, n int) (T, int, error)) msgCodec {
	return msgCodec{
		min: min,
		enc: func(e *encoder, b []byte, m Message) ([]byte, error) {
			v, ok := m.(T)
			if !ok {
				return nil, fmt.Errorf("unknown message type %T", m)
			}
			return enc(e, b, v)
		},
		dec: func(r *reader, id uint64, n int) (Message, int, error) { return dec(r, id, n) },
	}
}

// idOnly is the codec of a message that is its kind and id alone.
func idOnly[T Message](k Kind, id func(T) uint64, make func(id uint64) T) msgCodec {
	return codec(2,
		func(_ *encoder, b []byte, m T) ([]byte, error) { return appendHead(b, 2, k, id(m)), nil },
		func(_ *reader, v uint64, _ int) (T, int, error) { return make(v), 2, nil })
}

// codecs holds the codec of every kind; a kind without one is unknown.
var codecs = [256]msgCodec{
	// Supervisor -> stub.
	KindInitialize: codec(4,
		func(e *encoder, b []byte, m *InitializeMsg) ([]byte, error) {
			return e.appendAny(appendStringMap(appendHead(b, 4, KindInitialize, m.ID), m.Args), m.Options)
		},
		func(r *reader, id uint64, _ int) (v *InitializeMsg, _ int, err error) {
			v = &InitializeMsg{ID: id}
			if v.Args, err = r.stringMap(); err == nil {
				v.Options, err = r.anyMap()
			}
			return v, 4, err
		}),
	KindExecute: codec(3,
		func(_ *encoder, b []byte, m *ExecuteMsg) (_ []byte, err error) {
			b = appendArrayLen(appendHead(b, 3, KindExecute, m.BatchID), len(m.Requests))
			for i := range m.Requests {
				if b, err = appendRequest(b, &m.Requests[i]); err != nil {
					return nil, err
				}
			}
			return b, nil
		},
		func(r *reader, id uint64, _ int) (v *ExecuteMsg, _ int, err error) {
			v = &ExecuteMsg{BatchID: id}
			v.Requests, err = r.requests()
			return v, 3, err
		}),
	KindFinalize: idOnly(KindFinalize, func(m *FinalizeMsg) uint64 { return m.ID },
		func(id uint64) *FinalizeMsg { return &FinalizeMsg{ID: id} }),
	KindRelease: codec(3,
		func(_ *encoder, b []byte, m *ReleaseMsg) ([]byte, error) {
			return appendUint64s(appendHead(b, 3, KindRelease, 0), m.Offsets), nil
		},
		func(r *reader, _ uint64, _ int) (v *ReleaseMsg, _ int, err error) {
			v = &ReleaseMsg{}
			v.Offsets, err = r.uint64s()
			return v, 3, err
		}),
	KindCancel: idOnly(KindCancel, func(m *CancelMsg) uint64 { return m.Handle },
		func(id uint64) *CancelMsg { return &CancelMsg{Handle: id} }),
	KindIsReady: idOnly(KindIsReady, func(m *IsReadyMsg) uint64 { return m.ID },
		func(id uint64) *IsReadyMsg { return &IsReadyMsg{ID: id} }),
	KindCollectMetrics: idOnly(KindCollectMetrics, func(m *CollectMetricsMsg) uint64 { return m.ID },
		func(id uint64) *CollectMetricsMsg { return &CollectMetricsMsg{ID: id} }),
	KindAutoComplete: codec(4,
		func(e *encoder, b []byte, m *AutoCompleteMsg) (_ []byte, err error) {
			if b, err = e.appendAny(appendHead(b, 4, KindAutoComplete, m.ID), m.Options); err != nil {
				return nil, err
			}
			return appendString(b, m.ConfigJSON), nil
		},
		func(r *reader, id uint64, _ int) (v *AutoCompleteMsg, _ int, err error) {
			v = &AutoCompleteMsg{ID: id}
			if v.Options, err = r.anyMap(); err == nil {
				v.ConfigJSON, err = r.str()
			}
			return v, 4, err
		}),
	KindInferResult: codec(3,
		func(_ *encoder, b []byte, m *InferResultMsg) ([]byte, error) {
			return appendResponse(appendHead(b, 3, KindInferResult, m.ID), &m.Response), nil
		},
		func(r *reader, id uint64, _ int) (*InferResultMsg, int, error) {
			v := &InferResultMsg{ID: id}
			return v, 3, r.response(&v.Response)
		}),
	KindMapRegion: codec(5,
		// A CUDA region adds its IPC handle and device: 7 elements.
		func(_ *encoder, b []byte, m *MapRegionMsg) ([]byte, error) {
			n := 5
			if m.CUDAHandle != nil {
				n = 7
			}
			b = appendUint(appendUint(appendUint(appendHead(b, n, KindMapRegion, 0), m.RegionID), m.Offset), m.Size)
			if n == 7 {
				b = appendInt(appendBin(b, m.CUDAHandle), m.DeviceID)
			}
			return b, nil
		},
		func(r *reader, _ uint64, n int) (v *MapRegionMsg, _ int, err error) {
			v = &MapRegionMsg{}
			if v.RegionID, err = r.uint(math.MaxUint64); err == nil {
				if v.Offset, err = r.uint(math.MaxUint64); err == nil {
					v.Size, err = r.uint(math.MaxUint64)
				}
			}
			if err != nil || n < 7 {
				return v, 5, err
			}
			var h []byte
			if h, err = r.rawStr(); err == nil {
				v.CUDAHandle = append([]byte{}, h...)
				v.DeviceID, err = r.int()
			}
			return v, 7, err
		}),
	KindUnmapRegion: codec(3,
		func(_ *encoder, b []byte, m *UnmapRegionMsg) ([]byte, error) {
			return appendUint(appendHead(b, 3, KindUnmapRegion, 0), m.RegionID), nil
		},
		func(r *reader, _ uint64, _ int) (v *UnmapRegionMsg, _ int, err error) {
			v = &UnmapRegionMsg{}
			v.RegionID, err = r.uint(math.MaxUint64)
			return v, 3, err
		}),
	KindControlResult: codec(4,
		func(e *encoder, b []byte, m *ControlResultMsg) ([]byte, error) {
			return e.appendAny(appendError(appendHead(b, 4, KindControlResult, m.ID), m.Error), m.Value)
		},
		func(r *reader, id uint64, _ int) (v *ControlResultMsg, _ int, err error) {
			v = &ControlResultMsg{ID: id}
			if v.Error, err = r.error(); err == nil {
				v.Value, err = r.anyValue(0)
			}
			return v, 4, err
		}),

	// Stub -> supervisor.
	KindHello: codec(5,
		func(_ *encoder, b []byte, m *HelloMsg) ([]byte, error) {
			return appendStringMap(appendInt(appendInt(appendHead(b, 5, KindHello, 0), m.Version), m.PID), m.Info), nil
		},
		func(r *reader, _ uint64, _ int) (v *HelloMsg, _ int, err error) {
			v = &HelloMsg{}
			if v.Version, err = r.int(); err == nil {
				if v.PID, err = r.int(); err == nil {
					v.Info, err = r.stringMap()
				}
			}
			return v, 5, err
		}),
	KindResult: codec(4,
		func(e *encoder, b []byte, m *ResultMsg) ([]byte, error) {
			return e.appendAny(appendError(appendHead(b, 4, KindResult, m.ID), m.Error), m.Value)
		},
		func(r *reader, id uint64, _ int) (v *ResultMsg, _ int, err error) {
			v = &ResultMsg{ID: id}
			if v.Error, err = r.error(); err == nil {
				v.Value, err = r.anyValue(0)
			}
			return v, 4, err
		}),
	KindResponse: codec(3,
		func(_ *encoder, b []byte, m *ResponseMsg) ([]byte, error) {
			return appendResponse(appendHead(b, 3, KindResponse, 0), &m.Response), nil
		},
		func(r *reader, _ uint64, _ int) (*ResponseMsg, int, error) {
			v := &ResponseMsg{}
			return v, 3, r.response(&v.Response)
		}),
	KindExecuteDone: codec(4,
		// Rescheduled handles, when there are any, are a fifth element;
		// Open handles, when there are any, a sixth.
		func(_ *encoder, b []byte, m *ExecuteDoneMsg) ([]byte, error) {
			n := 4
			if len(m.Open) > 0 {
				n = 6
			} else if len(m.Rescheduled) > 0 {
				n = 5
			}
			b = appendArrayLen(appendError(appendHead(b, n, KindExecuteDone, m.BatchID), m.Error), len(m.Responses))
			for i := range m.Responses {
				b = appendResponse(b, &m.Responses[i])
			}
			if n >= 5 {
				b = appendUint64s(b, m.Rescheduled)
			}
			if n == 6 {
				b = appendUint64s(b, m.Open)
			}
			return b, nil
		},
		func(r *reader, id uint64, n int) (v *ExecuteDoneMsg, _ int, err error) {
			v = &ExecuteDoneMsg{BatchID: id}
			if v.Error, err = r.error(); err == nil {
				v.Responses, err = r.responses()
			}
			if err != nil || n < 5 {
				return v, 4, err
			}
			if v.Rescheduled, err = r.uint64s(); err != nil || n < 6 {
				return v, 5, err
			}
			v.Open, err = r.uint64s()
			return v, 6, err
		}),
	KindLog: codec(6,
		func(_ *encoder, b []byte, m *LogMsg) ([]byte, error) {
			b = appendString(appendString(appendString(appendHead(b, 6, KindLog, 0), m.Level), m.Message), m.File)
			return appendInt(b, m.Line), nil
		},
		func(r *reader, _ uint64, _ int) (v *LogMsg, _ int, err error) {
			v = &LogMsg{}
			if v.Level, err = r.str(); err == nil {
				if v.Message, err = r.str(); err == nil {
					if v.File, err = r.str(); err == nil {
						v.Line, err = r.int()
					}
				}
			}
			return v, 6, err
		}),
	KindInferExec: codec(6,
		func(_ *encoder, b []byte, m *InferExecMsg) (_ []byte, err error) {
			b = appendInt(appendString(appendHead(b, 6, KindInferExec, m.ID), m.ModelName), m.ModelVersion)
			if b, err = appendRequest(b, &m.Request); err != nil {
				return nil, err
			}
			return appendBool(b, m.Decoupled), nil
		},
		func(r *reader, id uint64, _ int) (v *InferExecMsg, _ int, err error) {
			v = &InferExecMsg{ID: id}
			if v.ModelName, err = r.str(); err == nil {
				if v.ModelVersion, err = r.int(); err == nil {
					if err = r.request(&v.Request); err == nil {
						v.Decoupled, err = r.bool()
					}
				}
			}
			return v, 6, err
		}),
	KindFree: codec(3,
		func(_ *encoder, b []byte, m *FreeMsg) ([]byte, error) {
			return appendUint64s(appendHead(b, 3, KindFree, 0), m.Offsets), nil
		},
		func(r *reader, _ uint64, _ int) (v *FreeMsg, _ int, err error) {
			v = &FreeMsg{}
			v.Offsets, err = r.uint64s()
			return v, 3, err
		}),
	KindInferCancel: idOnly(KindInferCancel, func(m *InferCancelMsg) uint64 { return m.ID },
		func(id uint64) *InferCancelMsg { return &InferCancelMsg{ID: id} }),
	KindModelCtl: codec(5,
		func(e *encoder, b []byte, m *ModelControlMsg) ([]byte, error) {
			return e.appendAny(appendString(appendString(appendHead(b, 5, KindModelCtl, m.ID), m.Op), m.Model), m.Options)
		},
		func(r *reader, id uint64, _ int) (v *ModelControlMsg, _ int, err error) {
			v = &ModelControlMsg{ID: id}
			if v.Op, err = r.str(); err == nil {
				if v.Model, err = r.str(); err == nil {
					v.Options, err = r.anyMap()
				}
			}
			return v, 5, err
		}),
}
