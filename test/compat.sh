#!/usr/bin/env bash
# test/compat.sh - run esfs's compatibility subset of the test suite against
# other Elasticsearch versions, one throw-away cluster per version.
#
# Usage: test/compat.sh [VERSION...]
#
# For each VERSION (default: the newest patch release of every minor line
# that Maven Central serves as the integration-test distribution, see
# DEFAULT_VERSIONS) it starts a plain and a secured single-node cluster with
# test/es.sh under $ESFS_COMPAT_HOME/<version> on their own ports, runs
#   go test -race -count=1 -run "$ESFS_COMPAT_RUN" ./test
# against them, stops them, and deletes that version's unzipped
# distribution and data (the downloaded zip stays in the maven repository).
# A table of the results is printed at the end; every version's full log
# stays in $ESFS_COMPAT_HOME/logs/<version>.log and one line per run is
# appended to $ESFS_COMPAT_HOME/results.tsv.
#
# Everything runs under `nice -n 19`: this is a background job.
#
# Environment:
#   ESFS_COMPAT_HOME     state directory (default /var/tmp/esfs-es-compat)
#   ESFS_COMPAT_PORT     HTTP port of the plain cluster (default 9600); the
#                        secure one uses +50 (9650), transport ports +100
#                        (9700, 9750). Never the 9200/9250 of test/es.sh's
#                        defaults, so the clusters of other test runs are
#                        safe.
#   ESFS_COMPAT_RUN      the -run regex (default: COMPAT_TESTS below)
#   ESFS_COMPAT_SECURE   0: no secure cluster (TestSecureClusterCredentials
#                        then skips); default 1
#   ESFS_COMPAT_KEEP     1: keep each version's distribution and data
#   ESFS_ES_JAVA_HOME    JDK for the nodes (see test/es.sh; by default a new
#                        enough JDK is found, also under /usr/lib/jvm)
set -euo pipefail
cd "$(dirname "$0")/.."

# Newest patch of each minor line that Maven Central served as
# org.elasticsearch.distribution.integ-test-zip:elasticsearch (probed
# 2026-11-25; the artifact's maven-metadata.xml is incomplete, so a HEAD
# request per version found these). 8.16 has only 8.16.0; 9.4 starts at 9.4.3.
# Order: newest and oldest first, then the rest spread over the range.
DEFAULT_VERSIONS=(
	9.5.4 8.0.1 9.0.8 8.19.21
	9.4.6 9.3.2 9.2.8 9.1.10
	8.10.4 8.5.3 8.15.5 8.2.3 8.17.10 8.7.1 8.12.2 8.18.6
	8.1.3 8.3.3 8.4.3 8.6.2 8.8.2 8.9.2 8.11.4 8.13.4 8.14.3 8.16.0
)

# The compatibility subset: every Elasticsearch feature esfs uses, in about
# three minutes (docs/compat.md says which test covers what).
COMPAT_TESTS=(
	TestCommandLineErrors          # the cluster's errors: no cluster, index not made by mkfs (404), invalid index name (400)
	TestPosixCases                 # the POSIX surface: _bulk with create/index/update/delete items, if_seq_no/if_primary_term, _mget, GET _doc
	TestSearch                     # esfs search: simple_query_string, regexp, case_insensitive term, composite aggs, search_after
	TestImportExport               # export/import: PIT + search_after scans of the whole filesystem
	TestFsckDirLinkCounts          # fsck: refresh, scans of every index, repairs by conditional writes
	TestMultiMountSeesChangesWithinBound # watch: _mget across indices, near-realtime refresh
	TestFlockAcrossMounts          # locks: create-only documents, conditional delete
	TestTypesAllKeptAcrossRemount  # remount: GET _mapping, _meta, settings
	TestSizeReaddirFarOffset       # deep search_after paging
	TestMetrics                    # heartbeat: session documents updated in place, read by esfs status
	TestStatfsReportsClusterDiskAndInodes # statfs: _nodes/stats/fs, _count
	TestSecureClusterCredentials   # TLS, basic auth, API keys (secure cluster)
)

COMPAT_HOME=$(realpath -m -- "${ESFS_COMPAT_HOME:-/var/tmp/esfs-es-compat}")
PORT=${ESFS_COMPAT_PORT:-9600}
RUN_RE=${ESFS_COMPAT_RUN:-^($(
	IFS='|'
	echo "${COMPAT_TESTS[*]}"
))\$}
SECURE=${ESFS_COMPAT_SECURE:-1}
LOGS=$COMPAT_HOME/logs
RESULTS=$COMPAT_HOME/results.tsv

((PORT >= 1024 && PORT <= 65000)) || {
	echo "compat.sh: ESFS_COMPAT_PORT must be between 1024 and 65000" >&2
	exit 2
}
if ((PORT <= 9250 && PORT + 150 >= 9200)); then
	echo "compat.sh: ESFS_COMPAT_PORT $PORT would collide with the default test clusters (9200-9450)" >&2
	exit 2
fi

versions=("$@")
((${#versions[@]})) || versions=("${DEFAULT_VERSIONS[@]}")
for v in "${versions[@]}"; do
	[[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || {
		echo "compat.sh: '$v' is not a version like 8.19.7" >&2
		exit 2
	}
done

mkdir -p "$LOGS"
[[ -s $RESULTS ]] || printf 'version\tresult\tstart_s\ttest_s\tdate\tjava\tfailed\n' >"$RESULTS"

log() { printf 'compat.sh: %s\n' "$*" >&2; }

# es.sh for version $1, plain or (with --secure) secure, niced like all else.
es() { # version args...
	local v=$1
	shift
	ESFS_ES_HOME=$COMPAT_HOME/$v ESFS_ES_VERSION=$v \
		ESFS_ES_PORT=$PORT ESFS_ES_TRANSPORT_PORT=$((PORT + 100)) \
		ESFS_ES_SECURE_PORT=$((PORT + 50)) ESFS_ES_SECURE_TRANSPORT_PORT=$((PORT + 150)) \
		nice -n 19 test/es.sh "$@"
}

CURRENT=''
stop_current() {
	[[ -n $CURRENT ]] || return 0
	es "$CURRENT" stop --secure >/dev/null 2>&1 || true
	es "$CURRENT" stop >/dev/null 2>&1 || true
	CURRENT=''
}
trap stop_current EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

declare -A RESULT START_S TEST_S FAILED
run_version() { # version
	local v=$1 logf=$LOGS/$1.log url t0 t1 rc=0 java secure_env
	: >"$logf"
	log "$v: starting Elasticsearch (log: $logf)"
	CURRENT=$v
	t0=$SECONDS
	if ! url=$(es "$v" start 2>>"$logf" | tail -n 1) || [[ -z $url ]]; then
		RESULT[$v]=START-FAIL
		FAILED[$v]="es.sh start: $(grep 'es.sh: error' "$logf" | tail -n 1 || true)"
		START_S[$v]=$((SECONDS - t0)) TEST_S[$v]=0
		finish "$v"
		return
	fi
	local -a env=(ELASTICSEARCH_URL="$url")
	if ((SECURE)); then
		if ! es "$v" start --secure >/dev/null 2>>"$logf" ||
			! secure_env=$(es "$v" secure-env 2>>"$logf"); then
			RESULT[$v]=START-FAIL
			FAILED[$v]="es.sh start --secure: $(grep 'es.sh: error' "$logf" | tail -n 1 || true)"
			START_S[$v]=$((SECONDS - t0)) TEST_S[$v]=0
			finish "$v"
			return
		fi
		# secure-env names the secure cluster ELASTICSEARCH_URL; the tests
		# want it as ESFS_TEST_SECURE_URL.
		env+=($(eval "$secure_env"
			printf 'ESFS_TEST_SECURE_URL=%s ESFS_ES_USERNAME=%s ESFS_ES_PASSWORD=%s ESFS_ES_CA_CERT=%s' \
				"$ELASTICSEARCH_URL" "$ESFS_ES_USERNAME" "$ESFS_ES_PASSWORD" "$ESFS_ES_CA_CERT"))
	else
		env+=(ESFS_TEST_SKIP_SECURE=1)
	fi
	java=$(grep -o 'java /[^)]*' "$logf" | head -n 1 | sed 's/^java //') || true
	t1=$SECONDS
	START_S[$v]=$((t1 - t0))
	log "$v: up after ${START_S[$v]}s; running the subset"
	env "${env[@]}" nice -n 19 go test -race -count=1 -timeout 30m -v -run "$RUN_RE" ./test >>"$logf" 2>&1 || rc=$?
	TEST_S[$v]=$((SECONDS - t1))
	if ((rc == 0)); then
		RESULT[$v]=PASS
		FAILED[$v]=''
	else
		RESULT[$v]=FAIL
		FAILED[$v]=$(grep -oE -- '--- FAIL: Test[A-Za-z0-9_/]+' "$logf" | awk '{print $3}' | sort -u | tr '\n' ' ') || true
		[[ -n ${FAILED[$v]} ]] || FAILED[$v]="go test exit status $rc"
	fi
	# A run that skipped a test has not tested what it claims (skipped
	# subtests are the kernel's business: utimens beyond 2038 and such).
	local skipped
	skipped=$(grep -oE -- '^--- SKIP: Test[A-Za-z0-9_]+' "$logf" | awk '{print $3}' | sort -u | tr '\n' ' ') || true
	[[ -n $skipped ]] && FAILED[$v]+="${FAILED[$v]:+; }skipped: $skipped"
	finish "$v" "$java"
}

# Stop the clusters, record the result, free the disk.
finish() { # version [java]
	local v=$1 java=${2:-}
	[[ -n $java ]] || java=$(grep -o 'java /[^)]*' "$LOGS/$v.log" | head -n 1 | sed 's/^java //') || true
	stop_current
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$v" "${RESULT[$v]}" "${START_S[$v]}" "${TEST_S[$v]}" \
		"$(date -u +%FT%TZ)" "${java:-?}" "${FAILED[$v]}" >>"$RESULTS"
	if [[ ${ESFS_COMPAT_KEEP:-0} != 1 ]]; then
		rm -rf "${COMPAT_HOME:?}/$v"
	fi
	log "$v: ${RESULT[$v]} (start ${START_S[$v]}s, tests ${TEST_S[$v]}s)${FAILED[$v]:+: ${FAILED[$v]}}"
}

for v in "${versions[@]}"; do
	run_version "$v"
done

printf '\n%-9s %-10s %8s %8s  %s\n' VERSION RESULT START_S TEST_S NOTES
for v in "${versions[@]}"; do
	printf '%-9s %-10s %8s %8s  %s\n' "$v" "${RESULT[$v]}" "${START_S[$v]}" "${TEST_S[$v]}" "${FAILED[$v]}"
done
for v in "${versions[@]}"; do
	[[ ${RESULT[$v]} == PASS ]] || exit 1
done
