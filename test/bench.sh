#!/usr/bin/env bash
# test/bench.sh - esfs's benchmark suite (issue 5): every case against a
# floor measured in the same run, written as a markdown table to
# test/bench/RESULTS.md (or $ESFS_BENCH_OUT).
#
# Uses the cluster ELASTICSEARCH_URL names; without one it starts a local
# cluster with test/es.sh and stops it again at the end (unless one was
# already running). Needs root (FUSE mounts, a tmpfs, drop_caches).
#
#   ESFS_BENCH_SCALE=quick|full  sizes: full is issue 5's (10k creates,
#                                256 MiB, 100k entries...), quick (the
#                                default) divides the big ones by ten
#   ESFS_BENCH_REPS=N            repetitions of each case (default 5)
#   ESFS_BENCH_ONLY=a,b          only these groups: stat, readdir, create,
#                                write_read, rename_file, rename_dir,
#                                rename_disjoint, lock_rt, memory
set -euo pipefail
cd "$(dirname "$0")/.."

stop_plain=0
cleanup() { if [ "$stop_plain" = 1 ]; then test/es.sh stop || true; fi; }
trap cleanup EXIT

if [ -z "${ELASTICSEARCH_URL:-}" ]; then
	if test/es.sh status >/dev/null 2>&1; then
		ELASTICSEARCH_URL=$(test/es.sh url)
	else
		stop_plain=1
		ELASTICSEARCH_URL=$(test/es.sh start | tail -n 1)
	fi
	export ELASTICSEARCH_URL
fi
command -v fusermount3 >/dev/null || { echo "bench.sh: needs fuse3 (apt-get install fuse3)" >&2; exit 1; }

# No -race: the figures are what users get.
ESFS_BENCH=1 go test -count=1 -timeout 3h -run '^TestSuite$' -v ./test/bench "$@" 2>&1 |
	grep --line-buffered -v '^=== \|level=\(INFO\|DEBUG\)'
echo "bench.sh: results in ${ESFS_BENCH_OUT:-test/bench/RESULTS.md}" >&2
