#!/bin/sh
# Runs e2e's BenchmarkScaling from the kit make scaling-kit packs, on a
# many-core machine that has no Go: the servers pinned to 1, 2, 4 and 8
# cores (SCALING_CPUS), the client to others (CLIENT_CPUS), ROUNDS runs of
# BENCHTIME calls a figure (FLOORS_GRPC_CONNS=8 spreads the gRPC calls
# over 8 connections, as a fleet of Envoys opens). Unpack the kit and run
# it from its directory:
#
#	tar -xzf scaling-kit.tgz && ./scaling.sh
set -eu
cd "$(dirname "$0")"
export E2E_BIN_DIR="$PWD"
export SCALING_CPUS="${SCALING_CPUS:-0 0-1 0-3 0-7}"
nproc
for round in $(seq "${ROUNDS:-3}"); do
	echo "=== round $round"
	taskset -c "${CLIENT_CPUS:-8-15}" ./e2e.test -test.run '^$' -test.bench Scaling -test.benchtime "${BENCHTIME:-100000x}"
done
