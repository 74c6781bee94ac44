package supervisor

// newScheduler picks the scheduler a model's config asks for.
func newScheduler(mv *modelVersion) (scheduler, error) {
	return &defaultScheduler{mv: mv}, nil
}

// defaultScheduler gives every request its own execute call and lets the
// first free instance take it.
type defaultScheduler struct{ mv *modelVersion }

func (s *defaultScheduler) enqueue(pr *pending) error {
	b := &batch{items: []*pending{pr}}
	select {
	case s.mv.queue <- b:
		return nil
	case <-pr.ctx.Done():
		return cancelledWhileQueued(s.mv, pr)
	}
}

func (s *defaultScheduler) stop() {}
