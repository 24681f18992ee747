#!/usr/bin/env bash
# test/up.sh MOUNTPOINT - everything from nothing to a mounted esfs.
#
# Starts a local Elasticsearch with test/es.sh unless ELASTICSEARCH_URL is
# set, builds ./esfs, creates the filesystem (esfs mkfs is idempotent) and
# mounts it at MOUNTPOINT in the background. ESFS_INDEX picks the filesystem
# (default fs). Unmount with: ./esfs umount MOUNTPOINT
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ]; then
	echo "usage: test/up.sh MOUNTPOINT" >&2
	exit 2
fi
mp=$1
command -v go >/dev/null || { echo "up.sh: Go is not installed" >&2; exit 1; }

if [ -z "${ELASTICSEARCH_URL:-}" ]; then
	ELASTICSEARCH_URL=$(test/es.sh start | tail -n 1)
	export ELASTICSEARCH_URL
fi
echo "up.sh: Elasticsearch at $ELASTICSEARCH_URL" >&2
go build -buildvcs=auto -o esfs .   # -buildvcs: record the commit for esfs --version
./esfs mkfs
mkdir -p "$mp"
./esfs mount --daemon "$mp"
