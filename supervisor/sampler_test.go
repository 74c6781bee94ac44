package supervisor

import (
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
)

func TestRingKeepsTheLastSamplesInOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		added int
		first int64 // UnixMS of the oldest sample kept
	}{
		{"empty", 0, 0},
		{"partly filled", 5, 1},
		{"exactly full", historyLen, 1},
		{"wrapped", historyLen + 7, 8},
		{"wrapped twice", 2*historyLen + 1, historyLen + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r ring
			for i := 1; i <= tc.added; i++ {
				r.add(backendapi.Sample{UnixMS: int64(i)})
			}
			got := r.samples()
			want := min(tc.added, historyLen)
			if len(got) != want {
				t.Fatalf("%d samples kept, want %d", len(got), want)
			}
			for i, s := range got {
				if s.UnixMS != tc.first+int64(i) {
					t.Fatalf("sample %d is %d, want %d", i, s.UnixMS, tc.first+int64(i))
				}
			}
			if len(got) > 0 {
				got[0].UnixMS = -1
				if r.samples()[0].UnixMS == -1 {
					t.Error("samples shares its slice with the ring")
				}
			}
		})
	}
}
