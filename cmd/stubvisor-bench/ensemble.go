package main

// The ensemble subcommand: three Python identity models chained five
// ways against the built bin/stubvisor over gRPC, measured in the same
// rounds: as an ensemble (one request), by the client (three requests,
// each output sent back as the next input), by a BLS model.py (one
// request, three sync exec() calls), by an async one (three awaited
// async_exec() calls per request, the requests of a dynamic batch at
// once; as in Triton, a batch's execute runs to its end before the next
// batch starts) and by the same async chain in a decoupled model
// (execute returns at once and every request's chain runs on the stub's
// event loop beside the others; one request and its one response on a
// ModelStreamInfer stream each caller keeps open), next to a single
// identity model as the yardstick of what one step moves. Each side
// also reports the context switches of the server and its stubs per
// chain (the wake-ups it took).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

func init() {
	register("ensemble", "a 3-step identity ensemble vs the same chain by the client and by BLS (gRPC)", runEnsembleBench)
}

const ensIdentityConfig = `name: "%s"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU } ]
`

var ensBenchModels = []benchModel{
	{"id_1", "identity_fp32", fmt.Sprintf(ensIdentityConfig, "id_1")},
	{"id_2", "identity_fp32", fmt.Sprintf(ensIdentityConfig, "id_2")},
	{"id_3", "identity_fp32", fmt.Sprintf(ensIdentityConfig, "id_3")},
	{"ens_id3", "ens_pipeline", `name: "ens_id3"
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "id_1" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "a" } },
  { model_name: "id_2" model_version: -1 input_map { key: "INPUT0" value: "a" } output_map { key: "OUTPUT0" value: "b" } },
  { model_name: "id_3" model_version: -1 input_map { key: "INPUT0" value: "b" } output_map { key: "OUTPUT0" value: "OUTPUT0" } }
] }
`},
	{"bls_id3", "bls_chain", `name: "bls_id3"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
parameters { key: "STEPS" value { string_value: "id_1,id_2,id_3" } }
instance_group [ { kind: KIND_CPU } ]
`},
	{"bls_async_id3", "bls_chain_async", `name: "bls_async_id3"
backend: "python"
max_batch_size: 16
dynamic_batching { }
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
parameters { key: "STEPS" value { string_value: "id_1,id_2,id_3" } }
instance_group [ { kind: KIND_CPU } ]
`},
	// No batching: a decoupled async execute returns at once, so the
	// instance is free again before a second request could join a
	// batch; each request's chain runs on its own.
	{"bls_async_dec_id3", "bls_chain_async_decoupled", `name: "bls_async_dec_id3"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
parameters { key: "STEPS" value { string_value: "id_1,id_2,id_3" } }
instance_group [ { kind: KIND_CPU } ]
`},
}

// ensSide is one way of running the chain: call does one chain on the
// client and checks the answer.
type ensSide struct {
	name string
	call func(ctx context.Context, c pb.GRPCInferenceServiceClient, in []byte) error
}

func inferOne(ctx context.Context, c pb.GRPCInferenceServiceClient, model string, in []byte) ([]byte, error) {
	return inferShaped(ctx, c, model, in, []int64{int64(len(in) / 4)})
}

func inferShaped(ctx context.Context, c pb.GRPCInferenceServiceClient, model string, in []byte, shape []int64) ([]byte, error) {
	r, err := c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: model,
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: shape}},
		RawInputContents: [][]byte{in}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", model, err)
	}
	if len(r.RawOutputContents) != 1 || len(r.RawOutputContents[0]) != len(in) {
		return nil, fmt.Errorf("%s: wrong output", model)
	}
	return r.RawOutputContents[0], nil
}

func oneModel(model string) func(context.Context, pb.GRPCInferenceServiceClient, []byte) error {
	return func(ctx context.Context, c pb.GRPCInferenceServiceClient, in []byte) error {
		_, err := inferOne(ctx, c, model, in)
		return err
	}
}

// batchedOne calls a model with a batch dimension: INPUT0 as one batch
// of one.
func batchedOne(model string) func(context.Context, pb.GRPCInferenceServiceClient, []byte) error {
	return func(ctx context.Context, c pb.GRPCInferenceServiceClient, in []byte) error {
		_, err := inferShaped(ctx, c, model, in, []int64{1, int64(len(in) / 4)})
		return err
	}
}

// streamedOne calls a decoupled model: one request on a ModelStreamInfer
// stream and its one (final) response. Each caller keeps a stream open
// across its calls, as tritonclient's stream does; closedLoop gives its
// callers one function, so the open streams wait in a free list between
// calls (never more of them than callers). A stream of an earlier load,
// whose context has ended, is dropped.
func streamedOne(model string) func(context.Context, pb.GRPCInferenceServiceClient, []byte) error {
	type open struct {
		ctx context.Context
		st  pb.GRPCInferenceService_ModelStreamInferClient
	}
	free := make(chan open, 64)
	return func(ctx context.Context, c pb.GRPCInferenceServiceClient, in []byte) error {
		var s open
		for s.st == nil {
			select {
			case s = <-free:
				if s.ctx != ctx {
					s.st = nil
				}
			default:
				st, err := c.ModelStreamInfer(ctx)
				if err != nil {
					return fmt.Errorf("%s: %w", model, err)
				}
				s = open{ctx, st}
			}
		}
		err := s.st.Send(&pb.ModelInferRequest{ModelName: model,
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{int64(len(in) / 4)}}},
			RawInputContents: [][]byte{in}})
		if err != nil {
			return fmt.Errorf("%s: %w", model, err)
		}
		m, err := s.st.Recv()
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", model, err)
		case m.ErrorMessage != "":
			return fmt.Errorf("%s: %s", model, m.ErrorMessage)
		case len(m.InferResponse.RawOutputContents) != 1 || len(m.InferResponse.RawOutputContents[0]) != len(in):
			return fmt.Errorf("%s: wrong output", model)
		}
		select {
		case free <- s:
		default:
			_ = s.st.CloseSend()
		}
		return nil
	}
}

func clientChain(ctx context.Context, c pb.GRPCInferenceServiceClient, in []byte) error {
	var err error
	for _, m := range []string{"id_1", "id_2", "id_3"} {
		if in, err = inferOne(ctx, c, m, in); err != nil {
			return err
		}
	}
	return nil
}

func runEnsembleBench(args []string) error {
	fs := flag.NewFlagSet("ensemble", flag.ContinueOnError)
	duration := fs.Duration("duration", 2*time.Second, "measured time per side and round")
	rounds := fs.Int("rounds", 3, "rounds, each measuring every side in turn; medians are printed")
	warmup := fs.Duration("warmup", time.Second, "unmeasured time before each side")
	sf := addServerFlags(fs)
	only := fs.String("case", "", "run only the cases whose name contains this (ending in $: whose name ends with it)")
	onlySides := fs.String("sides", "", "comma-separated sides to run (default all; the ensemble always runs, as every ratio's base)")
	perProc := fs.Bool("procs", false, "print each round's CPU time and context switches per chain of every process (server, each stub)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	printWakeCost()
	env, err := newBenchEnv("ensemble", sf, ensBenchModels...)
	if err != nil {
		return err
	}
	defer env.close()
	srv, err := env.start("gRPC")
	if err != nil {
		return err
	}
	defer srv.stop()
	sides := []ensSide{
		{"ensemble", oneModel("ens_id3")},
		{"client-chain", clientChain},
		{"bls", oneModel("bls_id3")},
		{"bls-async", batchedOne("bls_async_id3")},
		{"bls-async-decoupled", streamedOne("bls_async_dec_id3")},
		{"single", oneModel("id_1")},
	}
	if *onlySides != "" {
		want := strings.Split(*onlySides, ",")
		sides = slices.DeleteFunc(sides, func(sd ensSide) bool { return sd.name != "ensemble" && !slices.Contains(want, sd.name) })
	}
	pid := srv.cmd.Process.Pid
	for _, size := range []struct {
		name  string
		elems int
	}{{"16xFP32", 16}, {"4MiB", 1 << 20}} {
		for _, conc := range []int{1, 16} {
			caseName := fmt.Sprintf("%s-c%d", size.name, conc)
			if !caseMatches(caseName, *only) {
				continue
			}
			in := fp32Bytes(size.elems)
			var fns []func() (Stats, error)
			for _, sd := range sides {
				fns = append(fns, func() (Stats, error) {
					return loadChain(srv.addr, pid, sd, in, conc, *warmup, *duration, *perProc, caseName)
				})
			}
			med, ratios, err := alternateAll(*rounds, fns)
			if err != nil {
				return fmt.Errorf("%s: %w", caseName, err)
			}
			for i, sd := range sides {
				fmt.Printf("ensemble %s-%s p50_us=%.0f rps=%.0f ctxsw_per_chain=%.1f runq_us_per_chain=%.0f cpu_us_per_chain=%.0f\n", sd.name, caseName,
					float64(med[i].P50)/float64(time.Microsecond), med[i].PerSecond, med[i].CtxPerOp, float64(med[i].RunqPerOp)/float64(time.Microsecond),
					float64(med[i].CPUPerOp)/float64(time.Microsecond))
			}
			for i, sd := range sides[1:] {
				fmt.Printf("ensemble ratio %s: ensemble/%s=%.2f\n", caseName, sd.name, ratios[i+1])
			}
		}
	}
	return nil
}

// loadChain runs conc callers of one side on one connection for warmup,
// then measures for d; rps counts the whole chains that end in that time,
// and the CPU time, context switches and run-queue waits of pid's process
// tree in that time are divided among them. With perProc it prints them
// for each process apart (what each of the server and the stubs spent
// per chain).
func loadChain(addr string, pid int, sd ensSide, in []byte, conc int, warmup, d time.Duration, perProc bool, caseName string) (Stats, error) {
	type usage struct {
		tree map[string]schedUse
		self schedUse
	}
	use0 := make(chan usage, 1)
	go func() {
		time.Sleep(warmup)
		use0 <- usage{procsSched(pid), pidSched(os.Getpid(), false)}
	}()
	samples, err := grpcLoad(addr, conc, warmup, d, true, func(ctx context.Context, client pb.GRPCInferenceServiceClient) error {
		if err := sd.call(ctx, client, in); err != nil {
			return fmt.Errorf("%s: %w", sd.name, err)
		}
		return nil
	})
	if err != nil {
		return Stats{}, err
	}
	if len(samples) == 0 {
		return Stats{}, errors.New(sd.name + ": no chain completed in the measured time")
	}
	procs1, self1, u0 := procsSched(pid), pidSched(os.Getpid(), false), <-use0
	procs0 := u0.tree
	var sched schedUse
	var names []string
	for name, u := range procs1 {
		u = u.sub(procs0[name])
		procs1[name] = u
		sched = sched.add(u)
		names = append(names, name)
	}
	n := len(samples)
	s := summarize(samples, n, d)
	s.CtxPerOp = float64(sched.switches) / float64(n)
	s.RunqPerOp = sched.runq / time.Duration(n)
	s.CPUPerOp = sched.onCPU / time.Duration(n)
	if perProc {
		slices.Sort(names)
		// The bench's own process (the clients) is not in the totals.
		client := self1.sub(u0.self)
		line := fmt.Sprintf("ensemble procs %s-%s chains=%d bench=%.1fus/%.2fcs", sd.name, caseName, n,
			float64(client.onCPU)/float64(n)/float64(time.Microsecond), float64(client.switches)/float64(n))
		for _, name := range names {
			// Processes that did nothing for this side (the other
			// models' stubs) are left out.
			if u := procs1[name]; u.onCPU/time.Duration(n) >= time.Microsecond {
				line += fmt.Sprintf(" %s=%.1fus/%.2fcs", name, float64(u.onCPU)/float64(n)/float64(time.Microsecond), float64(u.switches)/float64(n))
			}
		}
		fmt.Println(line)
	}
	return s, nil
}
