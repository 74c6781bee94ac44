// Package ratelimit is Triton's rate limiter (--rate-limit=execution_count):
// an instance starts an execution only when the resources its instance
// group lists (rate_limiter.resources) are free, holds them while the
// execution runs, and gives them back when it ends; when several
// instances wait, the one with the lowest scaled priority goes next.
//
// Resources, as Triton keeps them: a resource is per device unless a
// model's config marks it global, so "R" on device 0 and "R" on device 1
// are two pools, while a global "G" is one pool for the whole server. A
// KIND_CPU or KIND_MODEL instance counts as device 0. How many copies a
// pool has is, by default, the largest count any registered instance asks
// for. Once --rate-limit-resource gives any count, those counts decide
// (a count without a device applies to every device; a global resource
// takes the largest count given for its name on any device), a resource
// no flag names has none, and a registration that could never run fails
// with Triton's text. A name may not be global in one model and per
// device in another.
//
// Priority, as Triton weighs it: an instance's scaled priority is the
// number of executions it has finished times its group's priority (0
// counts as 1), so an instance of priority 1 gets about twice the turns of
// one of priority 2 while both wait. Waiters are served strictly in that
// order, so a waiter whose resources are busy holds back those behind it,
// as Triton's staging queue does. Ties go to the lower priority value,
// then to the one that waited first (Triton leaves ties to its heap), so
// the order does not depend on which of two tied instances reached the
// limiter first.
//
// Every wait is bounded by the caller's context; a grant is released
// exactly once, whatever ends the execution (its end, or the death of
// the stub that ran it).
//
// # Files
//
//	doc.go      this description
//	limiter.go  Limiter (the pools, registration and its checks), Instance, Acquire, Grant
//
// # Lock order
//
// Limiter.mu is the only lock; nothing is called while it is held.
package ratelimit
