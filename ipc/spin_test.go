package ipc

import (
	"testing"
	"time"
)

// TestSpinnerAdapts drives the budget through the outcomes a waiter sees.
func TestSpinnerAdapts(t *testing.T) {
	const limit = 50 * time.Microsecond
	type wait struct {
		waited            time.Duration
		polled, preempted bool
	}
	cases := []struct {
		name  string
		waits []wait
		want  time.Duration
	}{
		{"starts at the limit", nil, limit},
		{"quick answers keep it", []wait{{5 * time.Microsecond, true, false}, {8 * time.Microsecond, true, false}}, limit},
		{"late answers halve it", []wait{{time.Millisecond, false, false}, {time.Millisecond, false, false}}, limit / 4},
		{"late answers drop it to zero", []wait{{time.Millisecond, false, false}, {time.Millisecond, false, false}, {time.Millisecond, false, false}, {time.Millisecond, false, false}, {time.Millisecond, false, false}, {time.Millisecond, false, false}}, 0},
		{"preemption drops it at once", []wait{{60 * time.Microsecond, false, true}}, 0},
		{"a sleep that ended soon brings it back", []wait{{60 * time.Microsecond, false, true}, {10 * time.Microsecond, false, false}}, 20 * time.Microsecond},
		{"a caught answer lifts it", []wait{{time.Millisecond, false, false}, {20 * time.Microsecond, true, false}}, 40 * time.Microsecond},
		{"never above the limit", []wait{{40 * time.Microsecond, false, false}}, limit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s spinner
			s.next(limit)
			for _, w := range c.waits {
				s.next(limit)
				s.done(limit, w.waited, w.polled, w.preempted)
			}
			if got := s.next(limit); got != c.want {
				t.Fatalf("budget %v, want %v", got, c.want)
			}
		})
	}
}
