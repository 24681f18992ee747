#!/usr/bin/env bash
# test/run.sh - the whole esfs test suite, against a real Elasticsearch.
#
# Uses the cluster ELASTICSEARCH_URL names; without one it starts a local
# cluster with test/es.sh and stops it again at the end (unless one was
# already running, which it then leaves alone). Extra arguments go to
# `go test` (e.g. -run TestPosix).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${ELASTICSEARCH_URL:-}" ]; then
	if test/es.sh status >/dev/null 2>&1; then
		ELASTICSEARCH_URL=$(test/es.sh url)
	else
		trap 'test/es.sh stop' EXIT
		ELASTICSEARCH_URL=$(test/es.sh start | tail -n 1)
	fi
	export ELASTICSEARCH_URL
fi
echo "run.sh: testing against $ELASTICSEARCH_URL" >&2

go vet ./...
# -race everywhere: the daemon is concurrent, and the integration tests build
# the esfs binary they mount with -race too.
go test -race -count=1 -timeout 75m "$@" ./...
