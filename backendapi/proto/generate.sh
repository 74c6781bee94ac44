#!/bin/sh
# generate.sh regenerates backendapi/inferencepb from the .proto sources in
# this directory (run by `make proto`). With an argument, it writes the
# package under that directory instead of the checkout (the drift test in
# backendapi/inferencepb uses this to compare with the committed files). The code generators are the versions
# pinned by go.mod's tool directive; protoc is the system one (Debian:
# protobuf-compiler). Running it twice gives the same files, and the result
# is committed so that building never needs protoc.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
dest=$(cd "${1:-$root}" && pwd)
cd "$root"

module=$(go list -m)
out=$dest/backendapi/inferencepb

command -v protoc >/dev/null 2>&1 || {
	echo "generate.sh: protoc not found (apt-get install protobuf-compiler)" >&2
	exit 1
}

# GOFLAGS=-mod=mod matches the Makefile: the tool binaries are built from
# the versions in go.mod even when go.sum is being filled in.
gen_go=$(GOFLAGS=-mod=mod go tool -n protoc-gen-go)
gen_grpc=$(GOFLAGS=-mod=mod go tool -n protoc-gen-go-grpc)

# Remove stale generated files (a proto that was renamed or dropped) but
# never hand-written ones.
mkdir -p "$out"
rm -f "$out"/*.pb.go

protoc -I backendapi/proto \
	--plugin=protoc-gen-go="$gen_go" \
	--plugin=protoc-gen-go-grpc="$gen_grpc" \
	--go_out="$dest" --go_opt=module="$module" \
	--go-grpc_out="$dest" --go-grpc_opt=module="$module" \
	model_config.proto grpc_service.proto

unformatted=$(gofmt -l "$out")
if [ -n "$unformatted" ]; then
	echo "generate.sh: not gofmt-clean: $unformatted" >&2
	exit 1
fi
