#!/usr/bin/env bash
# Regenerates the Go protobuf bindings under internal/wire/laggardv1/pb from
# api/laggard/v1/*.proto (ingest.proto: stage vectors; collective.proto:
# collective calls). Pinned: protoc 3.21.12 (apt protobuf-compiler) and
# protoc-gen-go v1.36.12 (go install
# google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12), on PATH or in
# $(go env GOPATH)/bin. The include root is api/ so the descriptor is
# registered as "laggard/v1/ingest.proto" (a bare "ingest.proto" could clash
# in the global protobuf registry); source_relative output therefore lands
# in laggard/v1/ and is moved into the Go package directory.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$(go env GOPATH)/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
protoc -I api --go_out="$tmp" --go_opt=paths=source_relative api/laggard/v1/*.proto
mkdir -p internal/wire/laggardv1/pb
mv "$tmp"/laggard/v1/*.pb.go internal/wire/laggardv1/pb/
