#!/usr/bin/env bash
# test/run.sh - the whole esfs test suite, against a real Elasticsearch.
#
# Uses the cluster ELASTICSEARCH_URL names; without one it starts a local
# cluster with test/es.sh and stops it again at the end (unless one was
# already running, which it then leaves alone). The same goes for the
# secured cluster (TLS, users, API keys; `test/es.sh start --secure`) that
# test/secure_test.go needs: ESFS_TEST_SECURE_URL names one (then with
# ESFS_ES_USERNAME, ESFS_ES_PASSWORD and ESFS_ES_CA_CERT), else it is
# started here; ESFS_TEST_SKIP_SECURE=1 does without it (those tests then
# skip). Extra arguments go to `go test` (e.g. -run TestPosix).
set -euo pipefail
cd "$(dirname "$0")/.."

stop_plain=0 stop_secure=0
# Stop only what this run started, also on failure or Ctrl-C.
cleanup() {
	if [ "$stop_secure" = 1 ]; then test/es.sh stop --secure || true; fi
	if [ "$stop_plain" = 1 ]; then test/es.sh stop || true; fi
}
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

if [ -z "${ESFS_TEST_SECURE_URL:-}" ] && [ "${ESFS_TEST_SKIP_SECURE:-}" != 1 ]; then
	if ! test/es.sh status --secure >/dev/null 2>&1; then
		stop_secure=1
		test/es.sh start --secure >/dev/null # the URL comes with secure-env
	fi
	# secure-env's export lines name the secure cluster ELASTICSEARCH_URL,
	# which must keep naming the plain one here. The credentials stay in
	# the environment of the whole suite: the plain cluster ignores them.
	plain_url=$ELASTICSEARCH_URL
	eval "$(test/es.sh secure-env)"
	ESFS_TEST_SECURE_URL=$ELASTICSEARCH_URL
	ELASTICSEARCH_URL=$plain_url
	export ESFS_TEST_SECURE_URL ESFS_ES_USERNAME ESFS_ES_PASSWORD ESFS_ES_CA_CERT
fi
echo "run.sh: testing against $ELASTICSEARCH_URL${ESFS_TEST_SECURE_URL:+ and, secured, $ESFS_TEST_SECURE_URL}" >&2

go vet ./...
# The race detector sleeps a second at each binary's exit, to let other
# goroutines finish a report. Reports are printed as races are met, a
# command that met one still exits 66, and a test fails on any report in
# the log of a mount it drove (mounttest): the suite spares the thousands of
# esfs commands it runs that second (minutes of CI).
export GORACE="${GORACE:-atexit_sleep_ms=0}"
# -race everywhere: the daemon is concurrent, and the integration tests build
# the esfs binary they mount with -race too. ESFS_TEST_LOCKORDER=1 also
# checks the order every lock is taken in, in the tests and in the mounts
# (locking/lockorder): a pair taken in both orders stops the process.
tags=()
if [ -n "${ESFS_TEST_LOCKORDER:-}" ]; then tags=(-tags lockorder); fi
if [ $# -gt 0 ]; then
	# The caller picks (say -run TestPosix): one go test, as asked.
	go test -race "${tags[@]}" -count=1 -timeout 75m "$@" ./...
	exit 0 # (a failure exits above, through set -e, stopping the clusters)
fi

# The packages' own tests first, on an otherwise idle machine: some judge a
# 1-3 s lease.
status=0
go test -race "${tags[@]}" -count=1 -timeout 20m $(go list ./... | grep -v '/test$') || status=1

# The integration tests (./test) spend most of their time waiting: for a
# lease to run out, a recall, Elasticsearch's fsync of its translog. Run
# serially they no longer fit CI's hour, so ESFS_TEST_SHARDS (2) processes
# run them at once, each every Nth test in the order go test lists them
# (file by file, so the long tests of one file, the three storms or the
# rename races, land in different shards). Each test works in an index
# prefix and directories of its own; the one test that starts a 3-node
# cluster of its own is in one shard only.
shards=${ESFS_TEST_SHARDS:-2}
mapfile -t tests < <(go test -race -list '^Test' ./test | grep '^Test')
pids=()
for ((k = 0; k < shards; k++)); do
	names=()
	for ((j = k; j < ${#tests[@]}; j += shards)); do names+=("${tests[j]}"); done
	[ ${#names[@]} -gt 0 ] || continue
	pattern="^($(IFS='|'; echo "${names[*]}"))\$"
	( go test -race "${tags[@]}" -count=1 -timeout 75m -run "$pattern" ./test 2>&1 | sed -u "s/^/[shard $k] /" ) &
	pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
