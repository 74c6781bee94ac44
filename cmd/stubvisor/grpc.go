package main

import (
	"context"
	"net"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
	frontend "github.com/stubvisor/stubvisor/server"
)

// grpcFront is the process's gRPC front end, kept so that shutdown can stop
// it (stopGRPC); nil until grpcService built it.
var (
	grpcMu    sync.Mutex
	grpcFront *frontend.GRPCServer
)

// grpcService returns the gRPC listener (KServe v2 gRPC, health and
// reflection). It fails the service rather than the process if the front
// end cannot be built, which only happens with a nil backend.
func grpcService(c *config, b backendapi.Backend, log hclog.Logger) []service {
	g, err := frontend.NewGRPC(b, frontend.GRPCOptions{Version: version, Logger: log})
	if err != nil {
		return []service{{name: "gRPC", port: c.grpcPort, serve: func(l net.Listener) error {
			_ = l.Close()
			return err
		}}}
	}
	grpcMu.Lock()
	grpcFront = g
	grpcMu.Unlock()
	return []service{{name: "gRPC", port: c.grpcPort, serve: g.Serve}}
}

// stopGRPC stops the gRPC server gracefully: no new RPCs, running ones
// (streams included) may finish until ctx's deadline, after which every
// connection is closed.
func stopGRPC(ctx context.Context) {
	grpcMu.Lock()
	g := grpcFront
	grpcMu.Unlock()
	if g != nil {
		g.GracefulStop(ctx)
	}
}
