#!/usr/bin/env bash
# test/scale.sh - esfs at scale: a tree of N small files for each
# N given (default 10000,100000,1000000), imported with `esfs import`, its
# largest directory (up to 100,000 entries) listed with ls -f and ls -l,
# find and du -s over the whole tree, that directory renamed, and the
# mount's peak memory; each figure against the raw requests of the same
# work in the same run. The rows go to test/bench/RESULTS.md (or
# $ESFS_BENCH_OUT) as scale_N_*, through test/bench.sh (its environment
# applies: ELASTICSEARCH_URL, ESFS_BENCH_REPS...).
#
#   test/scale.sh [N,N,...]
#
# A million files take about 4 GiB of the local disk (the source tree, in
# a temporary directory) and some minutes; 10,000 and 100,000 a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
export ESFS_BENCH_ONLY=scale
export ESFS_BENCH_SCALE_FILES="${1:-10000,100000,1000000}"
export ESFS_BENCH_REPS="${ESFS_BENCH_REPS:-3}"
exec test/bench.sh
