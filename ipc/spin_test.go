package ipc

import (
	"testing"
	"time"
)

// wait is one wait's outcome as the spinner hears of it.
type wait struct {
	waited            time.Duration
	polled, preempted bool
}

// sleeps is n waits that ended asleep after d.
func sleeps(n int, d time.Duration) []wait {
	w := make([]wait, n)
	for i := range w {
		w[i] = wait{waited: d}
	}
	return w
}

// seq joins runs of waits.
func seq(runs ...[]wait) []wait {
	var out []wait
	for _, r := range runs {
		out = append(out, r...)
	}
	return out
}

// preempt is a poll cut short by preemption; caught, an answer the poll
// caught.
var (
	preempt = []wait{{60 * time.Microsecond, false, true}}
	caught  = []wait{{5 * time.Microsecond, true, false}}
)

// TestSpinnerAdapts drives the budget through the outcomes a waiter sees.
func TestSpinnerAdapts(t *testing.T) {
	const limit = 50 * time.Microsecond
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
		{"a preemption holds polling off", seq(preempt, sleeps(1, 10*time.Microsecond)), 0},
		{"a sleep that ended soon brings it back after the hold", seq(preempt, sleeps(holdAfterPreempt, 10*time.Microsecond)), 20 * time.Microsecond},
		{"a second preemption holds twice as long", seq(preempt, sleeps(holdAfterPreempt, 10*time.Microsecond), preempt, sleeps(holdAfterPreempt, 10*time.Microsecond)), 0},
		{"a caught answer ends the backoff", seq(preempt, sleeps(holdAfterPreempt, 10*time.Microsecond), caught, preempt, sleeps(holdAfterPreempt, 10*time.Microsecond)), 20 * time.Microsecond},
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
