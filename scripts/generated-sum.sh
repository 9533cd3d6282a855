#!/usr/bin/env bash
# Prints one digest of the generated code and of everything it is generated
# from: the .proto and .sql files, the generators' configuration, and the
# pins of the generators themselves (tools/go.mod and go.sum for sqlc,
# protoc-gen-go and protoc-gen-connect-go; package-lock.json for buf and
# protoc-gen-es).
#
# make generate records it in tools/generated.sum. make check-generated
# regenerates, which builds the generators (minutes on a cold cache), only
# when the tree's digest is not the one recorded: otherwise the committed
# code is exactly what those sources and generators produced when it was
# recorded, and regenerating would change nothing. Files are found on disk,
# tracked or not, so that a new query file counts before it is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
{
  # What the code is generated from.
  find connect db/schema db/queries -type f \( -name '*.proto' -o -name '*.sql' -o -name 'buf*.yaml' \) -print0
  printf '%s\0' sqlc.yaml examples/typescript/buf.gen.yaml tools/go.mod tools/go.sum package-lock.json
  # What was generated.
  find connect db -type f -name '*.go' -exec grep -lZ '^// Code generated .* DO NOT EDIT\.$' {} +
  find examples/typescript/gen -type f -print0
} | LC_ALL=C sort -z -u | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
