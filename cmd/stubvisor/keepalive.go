package main

import (
	"errors"
	"flag"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// keepaliveFlags are tritonserver's gRPC keepalive flags, in
// milliseconds, with Triton's defaults. They were once accepted and
// ignored; the ping policy is a guard against idle-ping floods, so they
// now take effect.
type keepaliveFlags struct {
	timeMS, timeoutMS, minPingMS, pingStrikes, pingsWithoutData, ageMS, ageGraceMS int
	permitWithoutCalls                                                             bool
}

func (k *keepaliveFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&k.timeMS, "grpc-keepalive-time", 7200000, "ms between the keepalive pings the gRPC server sends")
	fs.IntVar(&k.timeoutMS, "grpc-keepalive-timeout", 20000, "ms the gRPC server waits for a keepalive ping's answer before closing the connection")
	fs.BoolVar(&k.permitWithoutCalls, "grpc-keepalive-permit-without-calls", false, "let gRPC clients send keepalive pings on connections without calls")
	fs.IntVar(&k.minPingMS, "grpc-http2-min-recv-ping-interval-without-data", 300000, "least ms between a client's pings; a client pinging faster is sent GOAWAY after the ping strikes")
	fs.IntVar(&k.pingStrikes, "grpc-http2-max-ping-strikes", 2, "bad pings allowed before GOAWAY; the gRPC library here allows 2, so only 0 (no limit in tritonserver, stricter here) and 2 or more are accepted")
	fs.IntVar(&k.pingsWithoutData, "grpc-http2-max-pings-without-data", 2, "pings the server sends without data (accepted; the gRPC library here has no such limit on the server's own pings)")
	fs.IntVar(&k.ageMS, "grpc-max-connection-age", 0, "ms after which a gRPC connection is sent GOAWAY (0: no limit)")
	fs.IntVar(&k.ageGraceMS, "grpc-max-connection-age-grace", 0, "ms a connection past its age may finish its calls (0: no limit)")
}

// options returns the grpc.ServerOptions the flags ask for.
func (k *keepaliveFlags) options() ([]grpc.ServerOption, error) {
	if k.timeMS <= 0 || k.timeoutMS <= 0 || k.minPingMS < 0 || k.ageMS < 0 || k.ageGraceMS < 0 || k.pingStrikes < 0 {
		return nil, errors.New("the gRPC keepalive flags take positive numbers of milliseconds")
	}
	if k.pingStrikes == 1 {
		return nil, errors.New("--grpc-http2-max-ping-strikes=1 is not available: the gRPC library here always allows 2 bad pings")
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	params := keepalive.ServerParameters{Time: ms(k.timeMS), Timeout: ms(k.timeoutMS)}
	if k.ageMS > 0 {
		params.MaxConnectionAge = ms(k.ageMS)
	}
	if k.ageGraceMS > 0 {
		params.MaxConnectionAgeGrace = ms(k.ageGraceMS)
	}
	return []grpc.ServerOption{
		grpc.KeepaliveParams(params),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: ms(k.minPingMS), PermitWithoutStream: k.permitWithoutCalls}),
	}, nil
}
