package ipc

import "time"

// spinner decides how long one waiter polls before it sleeps. Polling
// pays when the answer comes within the poll (no futex wake, no trip
// through the scheduler) and costs a CPU that someone else wanted when it
// does not. Which of the two happens depends on the peer and on the
// machine, so the budget is learnt from the waiter's own recent waits:
//
//   - a wait that ended while polling keeps the budget (and lifts it to
//     twice that wait, so a budget that fell comes back while answers are
//     quick);
//   - a wait that ended asleep, later than the largest budget, halves it:
//     polling would not have caught that answer;
//   - a wait that ended asleep, sooner than the largest budget, sets it to
//     twice that wait: a longer poll would have caught it;
//   - a poll that sees its own clock jump (the thread was descheduled in
//     the middle of polling) stops at once and drops the budget to zero:
//     the CPU is contended, the poll was taking the peer's or a
//     neighbour's slice, and waking costs less than that. The waiter then
//     sleeps at once for the next holdAfterPreempt waits (twice as many
//     after each poll preempted again, up to maxHold), whatever those
//     waits teach: on a contended machine a wait that ended asleep soon
//     says nothing about whether a poll would have been descheduled.
//
// On a contended machine every answer comes late (it waits for a slice
// too), so the budget stays at zero and the waiter sleeps at once; on a
// quiet one the waits that are short keep theirs. The spinner never calls
// sched_yield: on a busy CPU a yield hands the core to a neighbour for a
// whole slice, and a contended waiter now sleeps instead.
type spinner struct {
	budget   time.Duration // current poll budget, at most the caller's limit
	primed   bool          // budget holds a learnt value
	hold     int           // waits left that sleep at once (after a preemption)
	nextHold int           // the hold the next preemption sets
}

// preemptGap is the clock jump between two polls (a few hundred
// nanoseconds apart when the thread runs) that says the thread was
// descheduled while polling.
const preemptGap = 50 * time.Microsecond

// minBudget is the smallest poll worth starting.
const minBudget = time.Microsecond

// holdAfterPreempt and maxHold bound how many waits sleep at once after a
// preempted poll: the first preemption holds polling off for
// holdAfterPreempt waits, each further one (with no caught answer in
// between) twice as many, up to maxHold.
const (
	holdAfterPreempt = 4
	maxHold          = 256
)

// next returns the poll budget of the next wait, given the caller's
// limit (the configured spin).
func (s *spinner) next(limit time.Duration) time.Duration {
	if !s.primed {
		s.budget, s.primed = limit, true
	}
	if s.hold > 0 {
		s.hold--
		return 0
	}
	return min(s.budget, limit)
}

// done records how a wait ended: after waited, in the poll or not, and
// whether the poll was cut short by preemption.
func (s *spinner) done(limit, waited time.Duration, polled, preempted bool) {
	switch {
	case preempted:
		s.budget = 0
		s.hold = max(s.nextHold, holdAfterPreempt)
		s.nextHold = min(2*s.hold, maxHold)
	case polled:
		s.budget = min(limit, max(s.budget, 2*waited))
		s.nextHold = 0
	case waited < limit:
		s.budget = min(limit, 2*waited)
	default:
		s.budget /= 2
	}
	if s.budget < minBudget {
		s.budget = 0
	}
}
