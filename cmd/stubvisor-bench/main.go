// Command stubvisor-bench runs stubvisor's benchmarks:
//
//	stubvisor-bench <ipc|stub|http|grpc|shm> [flags]
//
// Each subcommand lives in its own file and registers itself at init time
// with register. Every benchmark prints one line per case and measures a
// yardstick in the same run, because absolute figures on a small shared
// machine drift from run to run while ratios hold.
//
// Benchmarks that need helper processes re-run this binary with roleEnv
// set to a name registered with registerRole, so a Go peer is always the
// code under test, not a stand-in.
package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// roleEnv selects a helper role instead of a subcommand.
const roleEnv = "STUBVISOR_BENCH_ROLE"

type command struct {
	summary string
	run     func(args []string) error
}

var (
	commands = map[string]command{}
	roles    = map[string]func() int{}
)

// register adds a subcommand; call it from an init function.
func register(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("stubvisor-bench: subcommand " + name + " registered twice")
	}
	commands[name] = command{summary: summary, run: run}
}

// registerRole adds a helper-process role; call it from an init function.
func registerRole(name string, run func() int) {
	if _, dup := roles[name]; dup {
		panic("stubvisor-bench: role " + name + " registered twice")
	}
	roles[name] = run
}

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		run, ok := roles[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "stubvisor-bench: unknown role %q\n", role)
			os.Exit(2)
		}
		os.Exit(run())
	}
	if len(os.Args) < 2 || commands[os.Args[1]].run == nil {
		usage()
		os.Exit(2)
	}
	if err := commands[os.Args[1]].run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "stubvisor-bench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: stubvisor-bench <subcommand> [flags]")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-6s %s\n", n, commands[n].summary)
	}
}

// repoRoot finds the repository (the directory holding go.mod) by walking
// up from the working directory, so the benchmarks find python/ and
// testdata/ wherever inside the tree they are started.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Stats summarises one case: latency percentiles of the samples and a
// throughput figure.
type Stats struct {
	P50, P99  time.Duration
	PerSecond float64
	CPUPerOp  time.Duration // CPU time of the server's processes per operation, when measured
	CtxPerOp  float64       // context switches of the server's threads per operation, when measured
	// ChildCtxPerOp is the part of CtxPerOp that the server's child
	// processes (stubs, a yardstick's workers) made.
	ChildCtxPerOp float64
	RunqPerOp     time.Duration // time the server's threads waited for a CPU per operation, when measured
}

// summarize sorts samples (per-operation durations) and returns their
// percentiles, with ops operations done in total over elapsed.
func summarize(samples []time.Duration, ops int, elapsed time.Duration) Stats {
	slices.Sort(samples)
	s := Stats{PerSecond: float64(ops) / elapsed.Seconds()}
	if n := len(samples); n > 0 {
		s.P50 = samples[n/2]
		s.P99 = samples[min(n-1, n*99/100)]
	}
	return s
}

// alternate measures a and b in turn, rounds times each, and returns for
// each the round with the median rate, and the median of the per-round
// ratios a/b. The machines these run on are noisy: alternating spreads
// their slow phases over both sides, and medians ignore the outliers.
func alternate(rounds int, a, b func() (Stats, error)) (sa, sb Stats, ratio float64, err error) {
	var as, bs []Stats
	var ratios []float64
	for range max(rounds, 1) {
		x, err := a()
		if err != nil {
			return sa, sb, 0, err
		}
		y, err := b()
		if err != nil {
			return sa, sb, 0, err
		}
		as, bs = append(as, x), append(bs, y)
		ratios = append(ratios, x.PerSecond/y.PerSecond)
	}
	byRate := func(x, y Stats) int { return cmp.Compare(x.PerSecond, y.PerSecond) }
	slices.SortFunc(as, byRate)
	slices.SortFunc(bs, byRate)
	slices.Sort(ratios)
	return as[len(as)/2], bs[len(bs)/2], ratios[len(ratios)/2], nil
}

// alternateAll measures every side in turn, rounds times, and returns for
// each the round with its median rate, and the median per-round ratio of
// side 0's rate to each side's (ratios[0] is 1).
func alternateAll(rounds int, sides []func() (Stats, error)) (medians []Stats, ratios []float64, err error) {
	runs := make([][]Stats, len(sides))
	perRound := make([][]float64, len(sides))
	for range max(rounds, 1) {
		var first Stats
		for i, side := range sides {
			s, err := side()
			if err != nil {
				return nil, nil, err
			}
			if i == 0 {
				first = s
			}
			runs[i] = append(runs[i], s)
			perRound[i] = append(perRound[i], first.PerSecond/s.PerSecond)
		}
	}
	for i := range sides {
		slices.SortFunc(runs[i], func(x, y Stats) int { return cmp.Compare(x.PerSecond, y.PerSecond) })
		slices.Sort(perRound[i])
		medians = append(medians, runs[i][len(runs[i])/2])
		ratios = append(ratios, perRound[i][len(perRound[i])/2])
	}
	return medians, ratios, nil
}

// printCase prints the one line a case reports.
func printCase(bench, name string, s Stats) {
	fmt.Printf("%s %s p50_us=%.2f p99_us=%.2f msgs_per_s=%.0f\n", bench, name,
		float64(s.P50)/float64(time.Microsecond), float64(s.P99)/float64(time.Microsecond), s.PerSecond)
}
