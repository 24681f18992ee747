#!/usr/bin/env bash
# test/campaign.sh - the fault campaign (test/campaign) for as long as asked.
#
#   test/campaign.sh --duration D [--seed S] [--per-seed P] [--mounts N]
#                    [--no-faults] [--exclude CLASS]... [--debug] [--cores]
#                    [--big-writes]
#
# Without --seed it runs fresh seeds one after the other, each for P
# (default 5m, less at the end) until D is used; a run that finds something
# ends there, and the next seed starts. With --seed it runs that one seed
# for D: the replay command every finding prints. --exclude CLASS (any
# number of times) names a finding class of a known open bug, which then
# ends its run without counting as a finding, so a long campaign goes on
# finding others (classes: see Classes in test/campaign/runner.go).
# --debug has the mounts log every FUSE request; a finding keeps the
# mounts' logs next to its history either way. --cores runs the mounts as
# cores in the test process (test/campaign/core.go): request faults only,
# more operations a minute. --big-writes lets the hole shape write past a
# kernel mount's 32 MiB dirty limit (seconds each; cores always do, past
# their 2 MiB). At the
# end it prints the totals: operations by kind, faults by kind (freezes
# and kills among them), findings by class, and each finding's seed.
#
# Uses ELASTICSEARCH_URL (test/es.sh start runs a cluster); runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."

duration="" seed="" per_seed=5m mounts=3 faults=1 exclude="" debug=0 cores=0 big=0
while [ $# -gt 0 ]; do
	case "$1" in
	--duration) duration=$2; shift 2 ;;
	--seed) seed=$2; shift 2 ;;
	--per-seed) per_seed=$2; shift 2 ;;
	--mounts) mounts=$2; shift 2 ;;
	--no-faults) faults=0; shift ;;
	--debug) debug=1; shift ;;
	--cores) cores=1; shift ;;
	--big-writes) big=1; shift ;;
	--exclude) exclude="${exclude:+$exclude,}$2"; shift 2 ;;
	-h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "campaign.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
if [ -z "$duration" ]; then
	echo "campaign.sh: --duration is required (say --duration 20m)" >&2
	exit 2
fi
: "${ELASTICSEARCH_URL:?set ELASTICSEARCH_URL (test/es.sh start runs a cluster)}"
export GORACE="${GORACE:-atexit_sleep_ms=0}" ESFS_TEST_SKIP_SECURE=1 ESFS_TEST_SKIP_3NODE=1

seconds() { # a Go duration (1h30m, 20m, 90s) in seconds
	local d=$1 s=0 n
	while [[ $d =~ ^([0-9]+)([hms])(.*)$ ]]; do
		n=${BASH_REMATCH[1]}
		case ${BASH_REMATCH[2]} in h) s=$((s + n * 3600)) ;; m) s=$((s + n * 60)) ;; s) s=$((s + n)) ;; esac
		d=${BASH_REMATCH[3]}
	done
	[ -z "$d" ] || { echo "campaign.sh: bad duration $1" >&2; exit 2; }
	echo "$s"
}

work=$(mktemp -d /tmp/esfs-campaign-run-XXXXXX)
bin=$work/test.bin
echo "campaign.sh: building the tests" >&2
go test -race -c -o "$bin" ./test
total=$(seconds "$duration")
chunk=$(seconds "$per_seed")
end=$(( $(date +%s) + total ))
runs=0 failed=0
: >"$work/totals"
while :; do
	left=$(( end - $(date +%s) ))
	[ "$left" -gt 5 ] || break
	if [ -n "$seed" ]; then
		s=$seed d=$total
	else
		s=$(( ($(od -An -N4 -tu4 /dev/urandom) % 1000000000) + 1000 ))
		d=$(( left < chunk ? left : chunk ))
	fi
	echo "campaign.sh: seed $s for ${d}s (replay: test/campaign.sh --seed $s --duration ${d}s --mounts $mounts$([ $faults = 1 ] || echo ' --no-faults')$([ $cores = 0 ] || echo ' --cores')$([ $big = 0 ] || echo ' --big-writes'))"
	log=$work/seed-$s.log
	status=0
	(cd test && ESFS_CAMPAIGN_SEED=$s ESFS_CAMPAIGN_DURATION=${d}s ESFS_CAMPAIGN_MOUNTS=$mounts \
		ESFS_CAMPAIGN_FAULTS=$faults ESFS_CAMPAIGN_EXCLUDE=$exclude ESFS_CAMPAIGN_DEBUG=$debug ESFS_CAMPAIGN_CORES=$cores ESFS_CAMPAIGN_BIG_WRITES=$big \
		"$bin" -test.run '^TestCampaign$' -test.v -test.count=1 -test.timeout 0 >"$log" 2>&1) || status=$?
	runs=$((runs + 1))
	grep -h 'CAMPAIGN-TOTALS' "$log" | sed 's/.*CAMPAIGN-TOTALS //' >>"$work/totals" || true
	grep -h 'CAMPAIGN seed' "$log" | sed 's/^ *[a-z_]*\.go:[0-9]*: //' || true
	if [ "$status" != 0 ]; then
		failed=$((failed + 1))
		echo "campaign.sh: seed $s FAILED (log: $log):"
		grep -A 30 'CAMPAIGN FINDING' "$log" | head -60 || tail -40 "$log"
	fi
	[ -z "$seed" ] || break
done
echo
echo "campaign.sh: $runs runs, $failed failed; logs in $work"
# Each totals line: seed=S ops KIND=N ... faults KIND=N ... findings CLASS=N ...
awk '
{ section = ""
  for (i = 1; i <= NF; i++) {
    if ($i == "ops" || $i == "faults" || $i == "findings") { section = $i; continue }
    if (split($i, kv, "=") == 2 && section != "") { sum[section, kv[1]] += kv[2]; names[section, kv[1]] = 1; all[section] += kv[2] }
  }
}
END {
  n = split("ops faults findings", sections, " ")
  for (j = 1; j <= n; j++) {
    s = sections[j]; line = ""
    for (k in names) { split(k, p, SUBSEP); if (p[1] == s) line = line " " p[2] "=" sum[k] }
    printf "%s: %d total;%s\n", s, all[s], line
  }
}' "$work/totals"
grep -h 'CAMPAIGN FINDING' "$work"/seed-*.log 2>/dev/null | sed 's/^ *[a-z_]*\.go:[0-9]*: //' | cut -c1-200 || true
[ "$failed" = 0 ]
