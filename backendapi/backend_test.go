package backendapi

import "testing"

func TestInferResponseRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run uses the response and returns the function it took, if any.
		run  func(r *InferResponse) func()
		want int // releases counted after run, the taken function called, and Release once more
	}{
		{"Release runs it once", func(r *InferResponse) func() { r.Release(); r.Release(); return nil }, 1},
		{"TakeRelease hands it over and leaves Release a no-op", func(r *InferResponse) func() {
			f := r.TakeRelease()
			r.Release()
			return f
		}, 1},
		{"TakeRelease twice gives nil the second time", func(r *InferResponse) func() {
			f := r.TakeRelease()
			if g := r.TakeRelease(); g != nil {
				t.Error("second TakeRelease returned a function")
			}
			return f
		}, 1},
		{"SetRelease puts a taken release back", func(r *InferResponse) func() {
			r.SetRelease(r.TakeRelease())
			return nil
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			r := &InferResponse{}
			r.SetRelease(func() { n++ })
			if f := tc.run(r); f != nil {
				f()
			}
			r.Release()
			if n != tc.want {
				t.Errorf("released %d times, want %d", n, tc.want)
			}
		})
	}
	var nilResp *InferResponse
	if nilResp.TakeRelease() != nil {
		t.Error("TakeRelease of a nil response returned a function")
	}
}
