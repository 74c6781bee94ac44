package ratelimit

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

// reg is one instance registration of a test.
type reg struct {
	name      string
	device    int
	resources []Resource
	priority  uint32
	err       string // part of the expected error, "" for none
}

func TestRegister(t *testing.T) {
	r := func(name string, count uint32) Resource { return Resource{Name: name, Count: count} }
	g := func(name string, count uint32) Resource { return Resource{Name: name, Count: count, Global: true} }
	for _, tc := range []struct {
		name     string
		supplies []Supply
		regs     []reg
		limits   map[string]uint64
	}{
		{
			name: "the largest ask decides (Triton's rate_limiter.md example)",
			regs: []reg{
				{name: "A", resources: []Resource{r("R1", 4), r("R2", 4)}},
				{name: "B", resources: []Resource{r("R2", 5), r("R3", 10), r("R4", 5)}},
				{name: "C", resources: []Resource{r("R1", 1), r("R3", 7), r("R4", 2)}},
			},
			limits: map[string]uint64{"R1@0": 4, "R2@0": 5, "R3@0": 10, "R4@0": 5},
		},
		{
			name:     "flags per device, for every device, and global (rate_limiter.md)",
			supplies: []Supply{{"R1", 10, AllDevices}, {"R2", 5, 0}, {"R2", 8, 1}, {"R3", 2, AllDevices}},
			regs: []reg{
				{name: "gpu0", device: 0, resources: []Resource{r("R1", 1), r("R2", 1), g("R3", 1)}},
				{name: "gpu1", device: 1, resources: []Resource{r("R1", 1), r("R2", 1)}},
			},
			limits: map[string]uint64{"R1@0": 10, "R2@0": 5, "R1@1": 10, "R2@1": 8, "R3": 2},
		},
		{
			name:     "a global resource takes the largest count given for its name on any device",
			supplies: []Supply{{"G", 3, 0}, {"G", 7, 1}},
			regs:     []reg{{name: "A", resources: []Resource{g("G", 2)}}},
			limits:   map[string]uint64{"G": 7},
		},
		{
			name:     "a name given twice for a device keeps the smaller count",
			supplies: []Supply{{"R", 6, AllDevices}, {"R", 2, AllDevices}},
			regs: []reg{
				{name: "A", resources: []Resource{r("R", 4)}, err: `Resource count for "R" is limited to 2 which will prevent scheduling of one or more model instances, the minimum required count is 4`},
				{name: "B", resources: []Resource{r("R", 2)}},
			},
			limits: map[string]uint64{"R@0": 2},
		},
		{
			name:     "a flag's count below an ask refuses the instance (L0_rate_limiter)",
			supplies: []Supply{{"resource1", 3, AllDevices}, {"resource2", 2, AllDevices}},
			regs: []reg{
				{name: "v2", resources: []Resource{r("resource1", 2), g("resource2", 2)}, priority: 2},
				{name: "v1", resources: []Resource{r("resource1", 4)}, err: `Resource count for "resource1" is limited to 3 which will prevent scheduling of one or more model instances, the minimum required count is 4`},
			},
			limits: map[string]uint64{"resource1@0": 3, "resource2": 2},
		},
		{
			name:     "once a flag gives a count, a resource no flag names has none",
			supplies: []Supply{{"resource1", 10, 10}, {"resource2", 2, AllDevices}},
			regs: []reg{
				{name: "v1", resources: []Resource{r("resource1", 4)}, err: `Resource count for "resource1" is limited to 0 which will prevent scheduling of one or more model instances, the minimum required count is 4`},
			},
			limits: map[string]uint64{},
		},
		{
			name: "a name both global and per device is refused; the limiter stays as it was",
			regs: []reg{
				{name: "v2", resources: []Resource{r("resource1", 2), g("resource2", 2)}},
				{name: "v3", resources: []Resource{r("resource1", 2), r("resource2", 2)}, err: `Resource "resource2" is present as both global and device-specific resource in the model configuration.`},
			},
			limits: map[string]uint64{"resource1@0": 2, "resource2": 2},
		},
		{
			name:   "no resources: nothing to limit",
			regs:   []reg{{name: "A", priority: 3}},
			limits: map[string]uint64{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(tc.supplies)
			for _, rg := range tc.regs {
				_, err := l.Register(rg.name, rg.device, rg.resources, rg.priority)
				switch {
				case rg.err == "" && err != nil:
					t.Fatalf("register %s: %v", rg.name, err)
				case rg.err != "" && (err == nil || !strings.Contains(err.Error(), rg.err) || !errors.Is(err, ErrResources)):
					t.Fatalf("register %s: error %v, want one with %q", rg.name, err, rg.err)
				}
			}
			if got := l.Limits(); !maps.Equal(got, tc.limits) {
				t.Errorf("limits %v, want %v", got, tc.limits)
			}
		})
	}
}

func TestUnregisterShrinksLimits(t *testing.T) {
	l := New(nil)
	a := mustRegister(t, l, "A", 0, []Resource{{Name: "R", Count: 4}}, 1)
	mustRegister(t, l, "B", 0, []Resource{{Name: "R", Count: 2}}, 1)
	a.Unregister()
	a.Unregister() // idempotent
	if got := l.Limits(); !maps.Equal(got, map[string]uint64{"R@0": 2}) {
		t.Errorf("limits after unregister %v, want R@0: 2", got)
	}
}

func mustRegister(t *testing.T, l *Limiter, name string, device int, res []Resource, priority uint32) *Instance {
	t.Helper()
	inst, err := l.Register(name, device, res, priority)
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// waiters is how many Acquires wait now.
func waiters(l *Limiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiting)
}

// waitWaiters blocks until n Acquires wait (they run on goroutines the
// test started; the limiter has no event to wait on for them).
func waitWaiters(t *testing.T, l *Limiter, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for waiters(l) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", waiters(l), n)
		}
		time.Sleep(time.Millisecond) // polling the waiting list: nothing to wait on
	}
}

// acquireAsync starts inst.Acquire(ctx) and returns where its result lands.
func acquireAsync(ctx context.Context, inst *Instance) chan *Grant {
	c := make(chan *Grant, 1)
	go func() {
		g, _ := inst.Acquire(ctx)
		c <- g
	}()
	return c
}

func TestAcquireShares(t *testing.T) {
	for _, tc := range []struct {
		name       string
		a, b       Resource
		devA, devB int
		together   bool // whether B runs while A holds its grant
	}{
		{"a global resource is shared across devices", Resource{"G", 1, true}, Resource{"G", 1, true}, 0, 1, false},
		{"a device's resource is not shared with another device", Resource{"R", 1, false}, Resource{"R", 1, false}, 0, 1, true},
		{"a device's resource is shared on its device", Resource{"R", 1, false}, Resource{"R", 1, false}, 2, 2, false},
		{"two copies serve two at once", Resource{"R", 2, false}, Resource{"R", 1, false}, 0, 0, false},
		{"different resources do not contend", Resource{"R", 1, false}, Resource{"S", 1, false}, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(nil)
			a := mustRegister(t, l, "A", tc.devA, []Resource{tc.a}, 1)
			b := mustRegister(t, l, "B", tc.devB, []Resource{tc.b}, 1)
			ga, err := a.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := acquireAsync(context.Background(), b)
			if tc.together {
				if gb := <-got; gb == nil {
					t.Fatal("B got no grant")
				}
				return
			}
			waitWaiters(t, l, 1)
			ga.Release()
			ga.Release() // idempotent: frees once
			if gb := <-got; gb == nil {
				t.Fatal("B got no grant after A released")
			}
			if _, n := b.Waited(); n != 1 {
				t.Errorf("B's waits %d, want 1", n)
			}
		})
	}
}

// TestTwoCopiesServeTwo: a count of 2 admits two single-copy holders and
// holds back the third.
func TestTwoCopiesServeTwo(t *testing.T) {
	l := New([]Supply{{"R", 2, AllDevices}})
	var insts []*Instance
	for _, n := range []string{"A", "B", "C"} {
		insts = append(insts, mustRegister(t, l, n, 0, []Resource{{Name: "R", Count: 1}}, 1))
	}
	g0, _ := insts[0].Acquire(context.Background())
	if _, err := insts[1].Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	third := acquireAsync(context.Background(), insts[2])
	waitWaiters(t, l, 1)
	g0.Release()
	if <-third == nil {
		t.Fatal("C got no grant")
	}
}

// TestPriorityOrder: with both always waiting, priority 1 gets two turns
// for each of priority 2's, in a fixed order (scaled priority =
// executions × priority; ties go to the lower priority value). B waits
// first, and still A goes first. The one that
// runs renews its grant (it has more work), as a stub's dispatcher does:
// it gives it back and waits again in one step.
func TestPriorityOrder(t *testing.T) {
	l := New(nil)
	hold := mustRegister(t, l, "H", 0, []Resource{{Name: "G", Count: 1, Global: true}}, 1)
	a := mustRegister(t, l, "A", 0, []Resource{{Name: "G", Count: 1, Global: true}}, 1)
	b := mustRegister(t, l, "B", 1, []Resource{{Name: "G", Count: 1, Global: true}}, 2)
	g, _ := hold.Acquire(context.Background())
	pending := map[*Instance]chan *Grant{b: acquireAsync(context.Background(), b)}
	waitWaiters(t, l, 1)
	pending[a] = acquireAsync(context.Background(), a)
	waitWaiters(t, l, 2)
	g.Release()
	var order strings.Builder
	for range 13 {
		// Exactly one of them is granted; the other still waits.
		var who *Instance
		select {
		case g = <-pending[a]:
			who = a
		case g = <-pending[b]:
			who = b
		case <-time.After(5 * time.Second):
			t.Fatal("no grant")
		}
		order.WriteString(who.name)
		c := make(chan *Grant, 1)
		go func(g *Grant) {
			ng, _ := g.Renew(context.Background())
			c <- ng
		}(g)
		pending[who] = c
	}
	if got, want := order.String(), "ABAABAABAABAA"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
}

// TestRenewCancelled: a renew whose context has ended gives the grant
// back and holds nothing.
func TestRenewCancelled(t *testing.T) {
	l := New(nil)
	a := mustRegister(t, l, "A", 0, []Resource{{Name: "R", Count: 1}}, 1)
	b := mustRegister(t, l, "B", 0, []Resource{{Name: "R", Count: 1}}, 1)
	g, _ := a.Acquire(context.Background())
	got := acquireAsync(context.Background(), b)
	waitWaiters(t, l, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ng, err := g.Renew(ctx); ng != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("renew: %v %v, want context.Canceled", ng, err)
	}
	if <-got == nil {
		t.Fatal("B got no grant once A gave its back")
	}
}

// TestCancelWhileWaiting: a waiter whose context ends leaves with its
// error, holds nothing, and no longer holds back the waiters behind it.
func TestCancelWhileWaiting(t *testing.T) {
	l := New(nil)
	big := mustRegister(t, l, "big", 0, []Resource{{Name: "R", Count: 2}}, 1)
	small := mustRegister(t, l, "small", 0, []Resource{{Name: "R", Count: 1}}, 5)
	holder := mustRegister(t, l, "holder", 0, []Resource{{Name: "R", Count: 1}}, 1)
	g, _ := holder.Acquire(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	bigDone := make(chan error, 1)
	go func() {
		_, err := big.Acquire(ctx)
		bigDone <- err
	}()
	waitWaiters(t, l, 1)
	// small fits (1 of 2 free) but waits behind big, the first in order.
	smallGot := acquireAsync(context.Background(), small)
	waitWaiters(t, l, 2)
	cancel()
	if err := <-bigDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("big: %v, want context.Canceled", err)
	}
	gs := <-smallGot
	if gs == nil {
		t.Fatal("small got no grant once big left")
	}
	g.Release()
	gs.Release()
	// Everything is free again: big runs at once.
	if _, err := big.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestNoResourcesStillOrdered: an instance that lists no resource is
// granted at once while nobody waits before it.
func TestNoResourcesStillOrdered(t *testing.T) {
	l := New(nil)
	free := mustRegister(t, l, "free", 0, nil, 1)
	for range 3 {
		g, err := free.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		g.Release()
	}
	if d, n := free.Waited(); n != 0 || d != 0 {
		t.Errorf("waited %v over %d waits, want none", d, n)
	}
}

// TestUnregisteredNeverBlocks: an instance unregistered while it waits
// (its model unloads) is granted at once and holds back nobody.
func TestUnregisteredNeverBlocks(t *testing.T) {
	l := New(nil)
	a := mustRegister(t, l, "A", 0, []Resource{{Name: "R", Count: 1}}, 1)
	b := mustRegister(t, l, "B", 0, []Resource{{Name: "R", Count: 1}}, 1)
	ga, _ := a.Acquire(context.Background())
	got := acquireAsync(context.Background(), b)
	waitWaiters(t, l, 1)
	b.Unregister()
	if <-got == nil {
		t.Fatal("unregistered B still waits")
	}
	ga.Release()
}
