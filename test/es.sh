#!/usr/bin/env bash
# test/es.sh - start/stop a throw-away Elasticsearch for esfs tests.
#
# Elasticsearch comes from Maven Central as Elastic's integration-test
# distribution (no bundled JDK, only the core modules), so the only
# prerequisites are a JDK >= 17, curl, unzip and (on a cold machine) mvn.
# Run `test/es.sh help` for usage.

set -euo pipefail
# Everything we create must be readable by the unprivileged node user.
umask 022

readonly PROG=es.sh

usage() {
	cat <<'EOF'
Usage: test/es.sh COMMAND [OPTIONS]

Runs a local, loopback-only Elasticsearch (plain HTTP, security disabled)
for esfs tests. Everything (distribution, data, logs, tmp, pid files)
lives under $ESFS_ES_HOME.

Commands:
  start [--nodes N]    Download (once, via mvn) and unzip (once) the
                       distribution, start N nodes (default 1), wait until
                       the cluster is yellow/green with all N nodes joined,
                       and print the URL as the last line of stdout.
                       If the same cluster (same node count, ports and
                       version) is already running and healthy, just print
                       the URL. If it is running but unhealthy, it is
                       restarted. If a cluster with a DIFFERENT node count,
                       port or version is running, start fails: use
                       `stop` first, or `restart`.
  restart [--nodes N]  stop, then start.
  stop                 SIGTERM all our nodes, wait up to
                       $ESFS_ES_STOP_TIMEOUT s, then SIGKILL. Exit 0 also
                       when nothing was running.
  status               Print state, URL, node count, version and health.
                       Exit 0 when running and healthy (yellow/green, all
                       nodes joined), 1 when unhealthy, 3 when stopped.
  url                  Print the URL of the running cluster (exit 1 if none).
  logs [I]             Print the last 100 lines of node I's log (default 0).
  clean                stop, then delete data and logs (keeps the unzipped
                       distribution, so the next start stays warm).
  help                 This text.

Progress and errors go to stderr; stdout only carries results.

Environment:
  ESFS_ES_HOME           state directory (default /var/tmp/esfs-es)
  ESFS_ES_VERSION        Elasticsearch version (default 8.19.7)
  ESFS_ES_PORT           HTTP port of node 0; node i uses port+i (default 9200)
  ESFS_ES_TRANSPORT_PORT transport port of node 0; node i uses port+i
                         (default 9400)
  ESFS_ES_NODES          default for --nodes (default 1)
  ESFS_ES_HEAP           heap per node, e.g. 1g or 768m (default: 1g for one
                         node, 768m each for 2-3 nodes, 512m each for more)
  ESFS_ES_START_TIMEOUT  seconds to wait for the cluster (default 180)
  ESFS_ES_STOP_TIMEOUT   seconds to wait for a clean shutdown (default 60)
  ESFS_ES_EXTRA_ARGS     extra node settings, whitespace-separated
                         key=value pairs, each passed as `-E key=value`
  ESFS_ES_JAVA_OPTS      extra JVM options for the nodes
  ESFS_ES_USER           user the nodes run as when invoked as root
                         (default esfs-es; created if missing)
  ESFS_M2_REPO           local maven repository (default ~/.m2/repository)
  ES_JAVA_HOME, JAVA_HOME, PATH
                         where the JDK (>= 17) is looked up, in that order

Data survives stop/start as long as version, node count and transport port
stay the same; otherwise it is wiped (the old cluster state would not fit).

Examples:
  url=$(test/es.sh start)            # single node, http://127.0.0.1:9200
  test/es.sh restart --nodes 3       # 3-node cluster on ports 9200-9202
  ESFS_ES_PORT=9500 ESFS_ES_HOME=/tmp/es2 test/es.sh start
EOF
}

# ---------------------------------------------------------------- config --

ES_VERSION=${ESFS_ES_VERSION:-8.19.7}
HTTP_PORT=${ESFS_ES_PORT:-9200}
TRANSPORT_PORT=${ESFS_ES_TRANSPORT_PORT:-9400}
START_TIMEOUT=${ESFS_ES_START_TIMEOUT:-180}
STOP_TIMEOUT=${ESFS_ES_STOP_TIMEOUT:-60}
ES_USER=${ESFS_ES_USER:-esfs-es}
M2_REPO=${ESFS_M2_REPO:-${HOME:-/root}/.m2/repository}
CLUSTER_NAME=esfs
HOST=127.0.0.1
MIN_JAVA=17

# Resolve symlinks once: the path we hand to bin/elasticsearch ends up in
# the JVM command line (-Des.path.home=...), which is how we recognise our
# own processes later, so it must be spelled the same way every time.
ES_HOME_DIR=$(realpath -m -- "${ESFS_ES_HOME:-/var/tmp/esfs-es}")
DIST_ROOT=$ES_HOME_DIR/dist
DIST=$DIST_ROOT/elasticsearch-$ES_VERSION
RUN_DIR=$ES_HOME_DIR/run
STATE_FILE=$RUN_DIR/cluster.env # describes the cluster last started
STAMP_FILE=$RUN_DIR/data.stamp  # what the data directories were made for

# Set while `start` owns nodes that must be torn down if it fails.
CLEANUP_ON_EXIT=0

# ------------------------------------------------------------- utilities --

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

check_port_number() { # name value
	if ! is_uint "$2" || (($2 < 1 || $2 > 65535)); then
		die "$1 must be a port number, got '$2'"
	fi
}

url_for() { printf 'http://%s:%s' "$HOST" "$1"; }

# curl against loopback; --noproxy so a CI-wide http_proxy is not used.
es_curl() { curl -sS --noproxy '*' "$@"; }

# Extract a scalar field from a flat JSON response without needing jq.
json_field() { # key json
	sed -n 's/.*"'"$1"'":"\{0,1\}\([^",}]*\).*/\1/p' <<<"$2" | head -n1
}

# True if pid exists and is not a zombie (a zombie still answers kill -0).
alive() {
	local pid=$1 stat
	[[ -n $pid && -r /proc/$pid/stat ]] || return 1
	stat=$(</proc/"$pid"/stat) 2>/dev/null || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

# True if pid is a live JVM started from one of our distributions. Both the
# CLI launcher and the server JVM carry -Des.path.home=<dist dir>; matching
# on our ESFS_ES_HOME keeps us away from anybody else's Elasticsearch.
is_ours() {
	local pid=$1 comm arg
	alive "$pid" || return 1
	read -r comm <"/proc/$pid/comm" 2>/dev/null || return 1
	[[ $comm == java ]] || return 1
	local -a args=()
	mapfile -d '' args <"/proc/$pid/cmdline" 2>/dev/null || return 1
	for arg in "${args[@]}"; do
		[[ $arg == "-Des.path.home=$DIST_ROOT/"* ]] && return 0
	done
	return 1
}

# All our JVMs, found by scanning /proc (catches nodes whose pid file is gone).
scan_our_pids() {
	local d pid
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		is_ours "$pid" && echo "$pid"
	done
	return 0
}

node_dir() { echo "$RUN_DIR/esfs-$1"; }

# ES writes its pid file without a trailing newline, so `read` would fail.
read_pidfile() { # file
	local pid=""
	[[ -r $1 ]] && pid=$(<"$1") 2>/dev/null
	pid=${pid//[!0-9]/}
	echo "$pid"
}

# pids from our pid files that are still our JVMs.
pidfile_pids() {
	local f pid
	for f in "$RUN_DIR"/esfs-*/es.pid; do
		pid=$(read_pidfile "$f")
		is_ours "$pid" && echo "$pid"
	done
	return 0
}

# Load the description of the last started cluster (if any) into S_*.
read_state() {
	S_NODES='' S_PORT='' S_TPORT='' S_VERSION=''
	[[ -r $STATE_FILE ]] || return 1
	local k v
	while IFS='=' read -r k v; do
		case $k in
		nodes) S_NODES=$v ;;
		http_port) S_PORT=$v ;;
		transport_port) S_TPORT=$v ;;
		version) S_VERSION=$v ;;
		esac
	done <"$STATE_FILE"
	[[ -n $S_NODES && -n $S_PORT ]]
}

# Lock so concurrent invocations (e.g. parallel test packages) do not race
# on unzip/start/stop. fd 9 is closed for every child we spawn, otherwise a
# daemonised node would hold the lock forever.
take_lock() {
	mkdir -p "$ES_HOME_DIR" 2>/dev/null || die "cannot create ESFS_ES_HOME $ES_HOME_DIR"
	[[ -w $ES_HOME_DIR ]] || die "ESFS_ES_HOME $ES_HOME_DIR is not writable by $(id -un)"
	command -v flock >/dev/null || return 0
	exec 9>>"$ES_HOME_DIR/.lock" || die "cannot open lock file $ES_HOME_DIR/.lock"
	flock -w 600 9 || die "timed out waiting for the lock on $ES_HOME_DIR/.lock"
}

# --------------------------------------------------------- prerequisites --

# Sets JAVA_HOME_RESOLVED to a JDK >= MIN_JAVA, or dies. ES needs a JDK
# home (ES_JAVA_HOME), so for a java found on PATH we ask the JVM for its
# java.home instead of guessing from the (possibly shimmed) path.
find_java() {
	local java props spec major home
	if [[ -n ${ES_JAVA_HOME:-} ]]; then
		java=$ES_JAVA_HOME/bin/java
	elif [[ -n ${JAVA_HOME:-} ]]; then
		java=$JAVA_HOME/bin/java
	elif ! java=$(command -v java); then
		die "java not found (need a JDK >= $MIN_JAVA on PATH or in JAVA_HOME)"
	fi
	[[ -x $java ]] || die "java not found: $java does not exist (check JAVA_HOME/ES_JAVA_HOME)"
	props=$("$java" -XshowSettings:properties -version 2>&1) || true
	spec=$(sed -n 's/^ *java\.specification\.version = //p' <<<"$props")
	home=$(sed -n 's/^ *java\.home = //p' <<<"$props")
	[[ -n $spec ]] || die "cannot determine the version of $java"
	major=${spec#1.} # 1.8 -> 8
	major=${major%%.*}
	if ! is_uint "$major" || ((major < MIN_JAVA)); then
		die "java $spec at $java is too old; Elasticsearch $ES_VERSION needs >= $MIN_JAVA"
	fi
	[[ -n $home && -x $home/bin/java ]] || home=${java%/bin/java}
	JAVA_HOME_RESOLVED=$home
}

# Elasticsearch refuses to run as root, so root runs the nodes as ES_USER.
# setpriv does not go through PAM, which would otherwise be free to reset
# the raised open-files limit.
AS_ES=()
setup_run_user() {
	if ((EUID != 0)); then
		AS_ES=()
		return
	fi
	if ! id -u "$ES_USER" >/dev/null 2>&1; then
		command -v useradd >/dev/null || die "useradd not found; create user $ES_USER by hand"
		log "creating system user $ES_USER"
		useradd --system --user-group --no-create-home --home-dir /nonexistent \
			--shell /usr/sbin/nologin "$ES_USER" ||
			id -u "$ES_USER" >/dev/null 2>&1 || die "could not create user $ES_USER"
	fi
	if command -v setpriv >/dev/null; then
		AS_ES=(setpriv "--reuid=$ES_USER" "--regid=$(id -g "$ES_USER")" --init-groups --)
	elif command -v runuser >/dev/null; then
		AS_ES=(runuser -u "$ES_USER" --)
	else
		die "need setpriv or runuser to run Elasticsearch as $ES_USER"
	fi
	# Catch unreadable parents (e.g. ESFS_ES_HOME under /root) or a JDK
	# the unprivileged user cannot execute, with a clear message.
	"${AS_ES[@]}" test -x "$DIST/bin/elasticsearch" ||
		die "user $ES_USER cannot access $DIST (is every parent of ESFS_ES_HOME world-searchable?)"
	"${AS_ES[@]}" test -x "$JAVA_HOME_RESOLVED/bin/java" ||
		die "user $ES_USER cannot execute $JAVA_HOME_RESOLVED/bin/java"
}

# ES wants 65535 open files; in dev mode (loopback) it only warns, so a
# lower hard limit (as in some containers) is not fatal.
raise_nofile() {
	local want=65535 cur
	cur=$(ulimit -n)
	[[ $cur == unlimited ]] && return 0
	((cur >= want)) && return 0
	ulimit -n "$want" 2>/dev/null && return 0
	ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
	log "note: open-files limit is $(ulimit -n) (wanted $want; hard limit prevents more)"
}

# ------------------------------------------------------------ distribution --

zip_path() {
	echo "$M2_REPO/org/elasticsearch/distribution/integ-test-zip/elasticsearch/$ES_VERSION/elasticsearch-$ES_VERSION.zip"
}

fetch_zip() {
	local zip
	zip=$(zip_path)
	[[ -s $zip ]] && return 0
	command -v mvn >/dev/null ||
		die "mvn not found; it is needed to download Elasticsearch $ES_VERSION (not cached at $zip)"
	log "downloading Elasticsearch $ES_VERSION via maven"
	local -a repo_opt=()
	[[ -n ${ESFS_M2_REPO:-} ]] && repo_opt=("-Dmaven.repo.local=$ESFS_M2_REPO")
	mvn -q -B -Dstyle.color=never "${repo_opt[@]}" dependency:get \
		"-Dartifact=org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION:zip" \
		-Dtransitive=false </dev/null >&2 9>&- ||
		die "mvn could not download org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION:zip"
	[[ -s $zip ]] || die "mvn succeeded but $zip is missing (custom localRepository? set ESFS_M2_REPO)"
}

# Unzip into a temp dir and rename, so an interrupted unzip never leaves a
# half-populated directory that later runs would take as cached.
ensure_dist() {
	[[ -x $DIST/bin/elasticsearch ]] && return 0
	fetch_zip
	mkdir -p "$DIST_ROOT"
	rm -rf "$DIST_ROOT"/.unzip.* # leftovers of interrupted runs (we hold the lock)
	local tmp zip
	zip=$(zip_path)
	tmp=$(mktemp -d "$DIST_ROOT/.unzip.XXXXXX")
	log "unzipping $(basename "$zip") into $DIST_ROOT"
	if command -v unzip >/dev/null; then
		unzip -q "$zip" -d "$tmp" || die "unzip of $zip failed"
	elif command -v python3 >/dev/null; then
		python3 -m zipfile -e "$zip" "$tmp" || die "unzip of $zip failed"
		chmod +x "$tmp/elasticsearch-$ES_VERSION"/bin/* # zipfile drops modes
	else
		die "need unzip (or python3) to unpack $zip"
	fi
	[[ -x $tmp/elasticsearch-$ES_VERSION/bin/elasticsearch ]] ||
		die "$zip does not contain elasticsearch-$ES_VERSION/bin/elasticsearch"
	# The distribution stays owned by the invoking user; the node user
	# only needs to read it (per-node config copies are writable instead).
	chmod -R a+rX "$tmp/elasticsearch-$ES_VERSION"
	mv "$tmp/elasticsearch-$ES_VERSION" "$DIST"
	rm -rf "$tmp"
}

# ----------------------------------------------------------------- nodes --

default_heap() { # nodes
	if [[ -n ${ESFS_ES_HEAP:-} ]]; then
		echo "$ESFS_ES_HEAP"
	elif (($1 == 1)); then
		echo 1g
	elif (($1 <= 3)); then
		echo 768m
	else
		echo 512m
	fi
}

# Prints "port holder" if something listens on 127.0.0.1:port.
port_busy() { # port
	(: <"/dev/tcp/$HOST/$1") 2>/dev/null || return 1
	local who=""
	if command -v ss >/dev/null; then
		# users:(("python3",pid=123,fd=3)) -> python3 (pid 123)
		who=$(ss -Htlnp "sport = :$1" 2>/dev/null |
			sed -n 's/.*users:(("\([^"]*\)",pid=\([0-9]*\).*/\1 (pid \2)/p' | head -n1) || true
	fi
	echo "${who:-unknown process}"
}

check_ports_free() { # nodes
	local i p who
	for ((i = 0; i < $1; i++)); do
		for p in $((HTTP_PORT + i)) $((TRANSPORT_PORT + i)); do
			if who=$(port_busy "$p"); then
				die "port $p on $HOST is already in use by $who, not by our node (set ESFS_ES_PORT / ESFS_ES_TRANSPORT_PORT)"
			fi
		done
	done
}

# Per-node directories. Each node gets its own copy of the config dir
# because Elasticsearch writes into it (keystore) and the distribution is
# shared and read-only for the node user. Data is wiped when the cluster
# shape changes, since the old cluster state would not fit.
# Sets FRESH=1 when the cluster must be bootstrapped from scratch.
prepare_nodes() { # nodes
	local n=$1 i nd stamp old_stamp=""
	stamp="version=$ES_VERSION nodes=$n transport_port=$TRANSPORT_PORT cluster=$CLUSTER_NAME"
	[[ -r $STAMP_FILE ]] && old_stamp=$(<"$STAMP_FILE")
	FRESH=0
	[[ $stamp == "$old_stamp" ]] || FRESH=1
	for ((i = 0; i < n; i++)); do
		nd=$(node_dir "$i")
		[[ -d $nd/data && -n $(ls -A "$nd/data" 2>/dev/null) ]] || FRESH=1
	done
	if ((FRESH)); then
		[[ -n $old_stamp ]] && log "cluster shape changed ($old_stamp -> $stamp); wiping old data"
		rm -rf "$RUN_DIR"/esfs-*
	fi
	mkdir -p "$RUN_DIR"
	for ((i = 0; i < n; i++)); do
		nd=$(node_dir "$i")
		mkdir -p "$nd/data" "$nd/logs" "$nd/tmp"
		rm -rf "$nd/config" "$nd/es.pid"
		cp -R "$DIST/config" "$nd/config"
		: >"$nd/launcher.log"
		if ((EUID == 0)); then
			chown -R "$ES_USER:$(id -g "$ES_USER")" "$nd"
		fi
	done
	chmod 755 "$ES_HOME_DIR" "$RUN_DIR"
	echo "$stamp" >"$STAMP_FILE"
}

# Settings for node i of n, one key=value per line. Add mode-specific
# settings here (a later secure mode can hook in next to the security line).
node_settings() { # i n fresh
	local i=$1 n=$2 fresh=$3 nd j seeds="" masters=""
	nd=$(node_dir "$i")
	cat <<EOF
cluster.name=$CLUSTER_NAME
node.name=esfs-$i
network.host=$HOST
http.port=$((HTTP_PORT + i))
transport.port=$((TRANSPORT_PORT + i))
path.data=$nd/data
path.logs=$nd/logs
xpack.security.enabled=false
cluster.routing.allocation.disk.threshold_enabled=false
EOF
	# The setting belongs to the ingest-geoip module, which the integ-test
	# distribution lacks; ES rejects settings no module registered.
	[[ -d $DIST/modules/ingest-geoip ]] && echo "ingest.geoip.downloader.enabled=false"
	if ((n == 1)); then
		echo "discovery.type=single-node"
	else
		for ((j = 0; j < n; j++)); do
			seeds+="${seeds:+,}$HOST:$((TRANSPORT_PORT + j))"
			masters+="${masters:+,}esfs-$j"
		done
		echo "discovery.seed_hosts=$seeds"
		# Only for the very first start: on restarts the stored cluster
		# state decides, and ES warns about a leftover bootstrap setting.
		((fresh)) && echo "cluster.initial_master_nodes=$masters"
	fi
	local kv
	for kv in ${ESFS_ES_EXTRA_ARGS:-}; do
		echo "$kv"
	done
	return 0
}

# Start node i in the background; its launcher pid goes to LAUNCHERS[i].
# `bin/elasticsearch -d` returns once the node is up (or failed), and the
# nodes of a multi-node cluster must start concurrently, since each waits
# for the others to form a quorum.
LAUNCHERS=()
launch_node() { # i n heap fresh
	local i=$1 n=$2 heap=$3 fresh=$4 nd kv
	nd=$(node_dir "$i")
	local -a eargs=()
	while IFS= read -r kv; do
		[[ -n $kv ]] && eargs+=(-E "$kv")
	done < <(node_settings "$i" "$n" "$fresh")
	(
		cd "$nd"
		exec "${AS_ES[@]}" env -u JAVA_HOME -u JAVA_TOOL_OPTIONS -u _JAVA_OPTIONS -u JAVA_OPTS \
			ES_JAVA_HOME="$JAVA_HOME_RESOLVED" \
			ES_JAVA_OPTS="-Xms$heap -Xmx$heap ${ESFS_ES_JAVA_OPTS:-}" \
			ES_PATH_CONF="$nd/config" \
			ES_TMPDIR="$nd/tmp" \
			HOME="$nd" \
			"$DIST/bin/elasticsearch" -d -p "$nd/es.pid" "${eargs[@]}"
	) </dev/null >"$nd/launcher.log" 2>&1 9>&- &
	LAUNCHERS[i]=$!
}

# The node's log since its last start attempt (the log file is appended to
# across restarts; every start begins with a "version[...]" line).
current_run_log() { # file
	awk '/\] version\[/ { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' "$1"
}

# One line saying why node i failed, for the final error message.
failure_reason() { # i
	local nd reason=""
	nd=$(node_dir "$1")
	if [[ -s $nd/logs/$CLUSTER_NAME.log ]]; then
		reason=$(current_run_log "$nd/logs/$CLUSTER_NAME.log" |
			grep -E '^[A-Za-z0-9_.$]+(Exception|Error)(: |$)' | tail -n 1) || true
	fi
	if [[ -z $reason && -s $nd/launcher.log ]]; then
		reason=$(grep -E '^(ERROR|Exception|Error)' "$nd/launcher.log" | tail -n 1) || true
	fi
	echo "${reason:0:300}"
}

# Last 40 lines of node i's main log; the launcher output (console copy
# plus the CLI's own errors) only when the main log is missing, otherwise
# just the CLI's ERROR lines.
show_node_log() { # i
	local nd main
	nd=$(node_dir "$1")
	main=$nd/logs/$CLUSTER_NAME.log
	if [[ -s $main ]]; then
		printf -- '----- last 40 lines of %s -----\n' "$main" >&2
		tail -n 40 "$main" >&2
		if grep -q '^ERROR' "$nd/launcher.log" 2>/dev/null; then
			printf -- '----- errors from %s -----\n' "$nd/launcher.log" >&2
			grep '^ERROR' "$nd/launcher.log" | tail -n 5 >&2
		fi
	elif [[ -s $nd/launcher.log ]]; then
		printf -- '----- last 40 lines of %s -----\n' "$nd/launcher.log" >&2
		tail -n 40 "$nd/launcher.log" >&2
	else
		printf -- '----- node esfs-%s wrote no log (%s) -----\n' "$1" "$nd" >&2
	fi
}

# Print the logs of node i, then fail with a one-line summary (last, so it
# is what a CI log ends with).
node_failed() { # i message
	local reason
	show_node_log "$1"
	reason=$(failure_reason "$1")
	fail_start "node esfs-$1 $2${reason:+: $reason}"
}

# Health check: yellow or green with exactly n nodes. $2 = server-side wait.
healthy() { # n wait
	local body
	body=$(es_curl --max-time $(($2 + 5)) \
		"$(url_for "$HTTP_PORT")/_cluster/health?wait_for_status=yellow&wait_for_nodes=$1&timeout=${2}s" 2>/dev/null) ||
		return 1
	LAST_HEALTH=$body
	[[ $(json_field timed_out "$body") == false ]] || return 1
	HEALTH_STATUS=$(json_field status "$body")
}

wait_for_cluster() { # n
	local n=$1 i rc pid deadline=$((SECONDS + START_TIMEOUT))
	local -a done_rc=()
	while :; do
		local all_launched=1
		for ((i = 0; i < n; i++)); do
			if [[ -z ${done_rc[i]:-} ]]; then
				if alive "${LAUNCHERS[i]}"; then
					all_launched=0
					continue
				fi
				rc=0
				wait "${LAUNCHERS[i]}" || rc=$?
				done_rc[i]=$rc
				((rc == 0)) || node_failed "$i" "failed to start (exit status $rc)"
			fi
			pid=$(read_pidfile "$(node_dir "$i")/es.pid")
			is_ours "$pid" || node_failed "$i" "died during startup"
		done
		if ((all_launched)) && healthy "$n" 2; then
			return 0
		fi
		if ((SECONDS >= deadline)); then
			for ((i = 0; i < n; i++)); do show_node_log "$i"; done
			fail_start "cluster not yellow/green with $n node(s) after ${START_TIMEOUT}s (ESFS_ES_START_TIMEOUT); last health: ${LAST_HEALTH:-no HTTP response}"
		fi
		sleep 0.5
	done
}

# ------------------------------------------------------------------ stop --

stop_all() {
	local -a pids=()
	mapfile -t pids < <({ pidfile_pids; scan_our_pids; } | sort -un)
	if ((${#pids[@]} == 0)); then
		rm -f "$RUN_DIR"/esfs-*/es.pid
		return 1 # nothing was running
	fi
	log "stopping ${#pids[@]} Elasticsearch process(es): ${pids[*]}"
	kill -TERM "${pids[@]}" 2>/dev/null || true
	local deadline=$((SECONDS + STOP_TIMEOUT)) p left
	while :; do
		left=()
		for p in "${pids[@]}"; do alive "$p" && left+=("$p"); done
		((${#left[@]} == 0)) && break
		if ((SECONDS >= deadline)); then
			log "still running after ${STOP_TIMEOUT}s, sending SIGKILL to ${left[*]}"
			kill -KILL "${left[@]}" 2>/dev/null || true
			sleep 1
			break
		fi
		sleep 0.5
	done
	rm -f "$RUN_DIR"/esfs-*/es.pid
	left=()
	mapfile -t left < <(scan_our_pids)
	((${#left[@]} == 0)) || die "could not stop Elasticsearch process(es) ${left[*]}"
	return 0
}

# -------------------------------------------------------------- commands --

parse_nodes() { # args... ; sets NODES
	NODES=${ESFS_ES_NODES:-1}
	while (($#)); do
		case $1 in
		--nodes | -n)
			(($# >= 2)) || die "$1 needs a value"
			NODES=$2
			shift 2
			;;
		--nodes=*)
			NODES=${1#--nodes=}
			shift
			;;
		*) die "unknown option '$1' (see: test/es.sh help)" ;;
		esac
	done
	if ! is_uint "$NODES" || ((NODES < 1 || NODES > 9)); then
		die "--nodes must be between 1 and 9, got '$NODES'"
	fi
}

cmd_start() {
	parse_nodes "$@"
	check_port_number ESFS_ES_PORT "$HTTP_PORT"
	check_port_number ESFS_ES_TRANSPORT_PORT "$TRANSPORT_PORT"
	is_uint "$START_TIMEOUT" || die "ESFS_ES_START_TIMEOUT must be a number of seconds"
	local url t0=$SECONDS
	url=$(url_for "$HTTP_PORT")
	take_lock

	# Already running?
	local -a running=()
	mapfile -t running < <(pidfile_pids)
	if ((${#running[@]} > 0)) && read_state; then
		if [[ $S_NODES == "$NODES" && $S_PORT == "$HTTP_PORT" &&
			$S_TPORT == "$TRANSPORT_PORT" && $S_VERSION == "$ES_VERSION" ]]; then
			if healthy "$NODES" 10; then
				log "already running ($NODES node(s), $HEALTH_STATUS)"
				echo "$url"
				return 0
			fi
			log "running cluster is not healthy; restarting it"
		else
			die "a $S_NODES-node Elasticsearch $S_VERSION is already running at $(url_for "$S_PORT") (wanted $NODES node(s), $ES_VERSION, $url); run 'test/es.sh stop' or 'test/es.sh restart' first"
		fi
	fi
	# Anything of ours still around at this point is stale or unhealthy.
	stop_all || true

	find_java
	ensure_dist
	setup_run_user
	check_ports_free "$NODES"
	raise_nofile
	prepare_nodes "$NODES"
	printf 'nodes=%s\nhttp_port=%s\ntransport_port=%s\nversion=%s\n' \
		"$NODES" "$HTTP_PORT" "$TRANSPORT_PORT" "$ES_VERSION" >"$STATE_FILE"

	local heap i
	heap=$(default_heap "$NODES")
	log "starting $NODES node(s) of Elasticsearch $ES_VERSION (heap $heap each, java $JAVA_HOME_RESOLVED)"
	CLEANUP_ON_EXIT=1
	for ((i = 0; i < NODES; i++)); do
		launch_node "$i" "$NODES" "$heap" "$FRESH"
	done
	wait_for_cluster "$NODES"
	CLEANUP_ON_EXIT=0
	for ((i = 0; i < NODES; i++)); do
		log "node esfs-$i: $(url_for $((HTTP_PORT + i))) (transport $HOST:$((TRANSPORT_PORT + i)))"
	done
	log "cluster is $HEALTH_STATUS with $NODES node(s) after $((SECONDS - t0))s"
	echo "$url"
}

cmd_stop() {
	take_lock
	if stop_all; then
		log "stopped"
	else
		log "not running"
	fi
}

cmd_status() {
	local -a running=()
	mapfile -t running < <(pidfile_pids)
	if ! read_state || ((${#running[@]} == 0)); then
		local -a strays=()
		mapfile -t strays < <(scan_our_pids)
		if ((${#strays[@]} > 0)); then
			echo "state:   broken (process(es) ${strays[*]} of ours without pid file; run: test/es.sh stop)"
		else
			echo "state:   stopped"
		fi
		echo "home:    $ES_HOME_DIR"
		return 3
	fi
	local url health nodes_json body status="" nnodes="" version="" ok=0
	url=$(url_for "$S_PORT")
	if body=$(es_curl --max-time 10 "$url/_cluster/health" 2>/dev/null); then
		status=$(json_field status "$body")
		nnodes=$(json_field number_of_nodes "$body")
	fi
	if nodes_json=$(es_curl --max-time 10 "$url/_nodes/_local?filter_path=nodes.*.version" 2>/dev/null); then
		version=$(json_field version "$nodes_json")
	fi
	health=${status:-unreachable}
	echo "state:   running (${#running[@]} of $S_NODES node processes alive)"
	echo "url:     $url"
	echo "nodes:   ${nnodes:-?} joined (expected $S_NODES)"
	echo "version: ${version:-?}"
	echo "health:  $health"
	echo "home:    $ES_HOME_DIR"
	[[ ($status == green || $status == yellow) && $nnodes == "$S_NODES" &&
		${#running[@]} == "$S_NODES" ]] && ok=1
	((ok)) || return 1
}

cmd_url() {
	local -a running=()
	mapfile -t running < <(pidfile_pids)
	if ! read_state || ((${#running[@]} == 0)); then
		die "not running (start it with: test/es.sh start)"
	fi
	url_for "$S_PORT"
	echo
}

cmd_logs() {
	local i=${1:-0} f
	is_uint "$i" || die "logs: node index must be a number"
	f=$(node_dir "$i")/logs/$CLUSTER_NAME.log
	[[ -r $f ]] || die "no log for node $i at $f"
	tail -n 100 "$f"
}

cmd_clean() {
	take_lock
	stop_all || true
	rm -rf "$RUN_DIR"
	log "removed $RUN_DIR (distribution kept in $DIST_ROOT)"
}

# Stop whatever this run started (on failure or interrupt during start).
cleanup_started() {
	if ((CLEANUP_ON_EXIT)); then
		CLEANUP_ON_EXIT=0
		log "stopping the node(s) started by this run"
		stop_all || true
	fi
}

# Failed start: clean up first so the error is the last line printed.
fail_start() { # message
	cleanup_started
	die "$1"
}

on_exit() { cleanup_started; }

main() {
	# set -e exits silently; say where, so a CI log is never a mystery.
	set -E
	trap 'printf "%s: error: internal error: \"%s\" failed (line %s)\n" "$PROG" "$BASH_COMMAND" "$LINENO" >&2' ERR
	trap on_exit EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	local cmd=${1:-help}
	(($#)) && shift
	case $cmd in
	start) cmd_start "$@" ;;
	restart)
		parse_nodes "$@" # validate before stopping anything
		cmd_stop
		cmd_start "$@"
		;;
	stop) cmd_stop ;;
	status) cmd_status || exit $? ;;
	url) cmd_url ;;
	logs) cmd_logs "$@" ;;
	clean) cmd_clean ;;
	help | -h | --help) usage ;;
	*)
		usage >&2
		die "unknown command '$cmd'"
		;;
	esac
}

main "$@"
