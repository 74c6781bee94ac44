package main

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
)

// grpcService returns the gRPC listener; the gRPC front end is not built yet.
func grpcService(c *config, b backendapi.Backend, log hclog.Logger) []service { return nil }

// stopGRPC stops the gRPC server gracefully.
func stopGRPC(ctx context.Context) {}
