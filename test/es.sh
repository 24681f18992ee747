#!/usr/bin/env bash
# test/es.sh - start/stop a throw-away Elasticsearch for esfs tests.
#
# Elasticsearch comes from Maven Central as Elastic's integration-test
# distribution (no bundled JDK, only the core modules), so the only
# prerequisites are a JDK (>= 17; >= 21 for Elasticsearch 9), curl, unzip
# and (on a cold machine) mvn. Versions 8.0 to 9.x work (docs/compat.md).
# Run `test/es.sh help` for usage.

set -euo pipefail
# Everything we create must be readable by the unprivileged node user.
umask 022

readonly PROG=es.sh

usage() {
	cat <<'EOF'
Usage: test/es.sh COMMAND [--secure] [OPTIONS]

Runs a local, loopback-only Elasticsearch for esfs tests: plain HTTP with
security disabled, or with --secure (or ESFS_ES_SECURE=1) a second,
independent cluster with security on (TLS, users, API keys). Everything
(distribution, data, logs, tmp, pid files) lives under $ESFS_ES_HOME, the
secure cluster's under $ESFS_ES_HOME/secure; both can run at once.

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
                       distribution, so the next start stays warm; with
                       --secure also keeps certificates and password).
  secure-env           (implies --secure) Print shell `export` lines for
                       the running secure cluster: ELASTICSEARCH_URL,
                       ESFS_ES_USERNAME, ESFS_ES_PASSWORD, ESFS_ES_CA_CERT.
                       The only command that ever prints the password.
  api-key [NAME]       (implies --secure) Create an API key as user elastic
                       (POST /_security/api_key) and print its `encoded`
                       form, ready for ESFS_ES_API_KEY.
  help                 This text.

Every command takes --secure to act on the secure cluster instead.
Progress and errors go to stderr; stdout only carries results.

Secure mode: the same distribution with x-pack security on.
  - TLS on HTTP and on the transport layer (ES 8 requires transport TLS
    with security on as soon as there is more than one node), with a CA
    and a node certificate for 127.0.0.1, ::1 and localhost, made once by
    the distribution's bin/elasticsearch-certutil. The CA (PEM) stays at
    $ESFS_ES_HOME/secure/certs/ca.crt across restarts and `clean`.
  - User `elastic`, whose password is the keystore's bootstrap.password:
    random, made once, kept in $ESFS_ES_HOME/secure/secrets (mode 0700).
  - Own ports (9250 HTTP, 9450 transport), heap 512m per node.
  - A tiny plugin, esfs-analysis-shim, built once with the JDK's javac:
    the security index (API keys, users) needs three analysis components
    of the analysis-common module, which this distribution lacks.
  Typical use:
    test/es.sh start --secure
    eval "$(test/es.sh secure-env)"    # esfs now finds URL, user, CA
    export ESFS_ES_API_KEY=$(test/es.sh api-key)   # or: an API key

Environment:
  ESFS_ES_HOME           state directory (default /var/tmp/esfs-es)
  ESFS_ES_VERSION        Elasticsearch version (default 8.19.7; 8.0.0 and
                         later, see docs/compat.md and test/compat.sh)
  ESFS_ES_PORT           HTTP port of node 0; node i uses port+i (default 9200)
  ESFS_ES_TRANSPORT_PORT transport port of node 0; node i uses port+i
                         (default 9400)
  ESFS_ES_NODES          default for --nodes (default 1)
  ESFS_ES_HEAP           heap per node, e.g. 1g or 768m (default: 1g for one
                         node, 768m each for 2-3 nodes, 512m each for more)
  ESFS_ES_SECURE         1: act on the secure cluster, as with --secure
  ESFS_ES_SECURE_PORT, ESFS_ES_SECURE_TRANSPORT_PORT, ESFS_ES_SECURE_HEAP
                         ESFS_ES_PORT, ESFS_ES_TRANSPORT_PORT and
                         ESFS_ES_HEAP of the secure cluster (defaults 9250,
                         9450, 512m); separate, so that moving one cluster
                         never moves the other onto it
  ESFS_ES_START_TIMEOUT  seconds to wait for the cluster (default 180)
  ESFS_ES_STOP_TIMEOUT   seconds to wait for a clean shutdown (default 60)
  ESFS_ES_EXTRA_ARGS     extra node settings, whitespace-separated
                         key=value pairs, each passed as `-E key=value`
  ESFS_ES_JAVA_OPTS      extra JVM options for the nodes
  ESFS_ES_USER           user the nodes run as when invoked as root
                         (default esfs-es; created if missing)
  ESFS_M2_REPO           local maven repository (default ~/.m2/repository)
  ESFS_ES_JAVA_HOME      the JDK the nodes run on, taken as it is
  ES_JAVA_HOME, JAVA_HOME, PATH
                         otherwise where the JDK is looked up, in that order;
                         it must be >= 17 for 8.x, >= 21 for 9.x. If that
                         one is too old, the newest new enough JDK under
                         /usr/lib/jvm is used

Data survives stop/start as long as version, node count and transport port
stay the same; otherwise it is wiped (the old cluster state would not fit).

Examples:
  url=$(test/es.sh start)            # single node, http://127.0.0.1:9200
  test/es.sh restart --nodes 3       # 3-node cluster on ports 9200-9202
  ESFS_ES_PORT=9500 ESFS_ES_HOME=/tmp/es2 test/es.sh start
  url=$(test/es.sh start --secure)   # single node, https://127.0.0.1:9250
  test/es.sh status --secure; test/es.sh stop --secure
EOF
}

# ---------------------------------------------------------------- config --

ES_VERSION=${ESFS_ES_VERSION:-8.19.7}
START_TIMEOUT=${ESFS_ES_START_TIMEOUT:-180}
STOP_TIMEOUT=${ESFS_ES_STOP_TIMEOUT:-60}
ES_USER=${ESFS_ES_USER:-esfs-es}
M2_REPO=${ESFS_M2_REPO:-${HOME:-/root}/.m2/repository}
HOST=127.0.0.1
# Elasticsearch 9 is built for Java 21, 8.x for Java 17.
if [[ $ES_VERSION =~ ^([0-9]+)\. ]] && ((BASH_REMATCH[1] >= 9)); then
	MIN_JAVA=21
else
	MIN_JAVA=17
fi
# The superuser of the secure cluster (a reserved user: its password is the
# keystore's bootstrap.password until someone changes it through the API).
SECURE_USER=elastic

# Resolve symlinks once: the path we hand to bin/elasticsearch ends up in
# the JVM command line (-Des.path.home=...), which is how we recognise our
# own processes later, so it must be spelled the same way every time.
BASE_HOME=$(realpath -m -- "${ESFS_ES_HOME:-/var/tmp/esfs-es}")

# Set the mode-dependent configuration; SECURE must be set (0 or 1). The
# secure cluster is a complete second home under $BASE_HOME/secure, with
# its own copy of the distribution: process recognition (is_ours), lock,
# pid and state files then keep both clusters apart with no extra logic,
# and a plain `stop` can never touch a secure node or vice versa.
configure() {
	if ((SECURE)); then
		SCHEME=https
		HTTP_PORT=${ESFS_ES_SECURE_PORT:-9250}
		TRANSPORT_PORT=${ESFS_ES_SECURE_TRANSPORT_PORT:-9450}
		CLUSTER_NAME=esfs-secure
		ES_HOME_DIR=$BASE_HOME/secure
		MODE_OPT=' --secure' # for hints in messages
	else
		SCHEME=http
		HTTP_PORT=${ESFS_ES_PORT:-9200}
		TRANSPORT_PORT=${ESFS_ES_TRANSPORT_PORT:-9400}
		CLUSTER_NAME=esfs
		ES_HOME_DIR=$BASE_HOME
		MODE_OPT=''
	fi
	DIST_ROOT=$ES_HOME_DIR/dist
	DIST=$DIST_ROOT/elasticsearch-$ES_VERSION
	RUN_DIR=$ES_HOME_DIR/run
	STATE_FILE=$RUN_DIR/cluster.env # describes the cluster last started
	STAMP_FILE=$RUN_DIR/data.stamp  # what the data directories were made for
	# Secure mode only. Certificates are public and world-readable (clients
	# need the CA); the secrets directory is the invoking user's alone.
	CERT_DIR=$ES_HOME_DIR/certs
	CA_CERT=$CERT_DIR/ca.crt
	SECRET_DIR=$ES_HOME_DIR/secrets
	PASSWORD_FILE=$SECRET_DIR/elastic.password
	KEYSTORE=$SECRET_DIR/elasticsearch.keystore
}

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

url_for() { printf '%s://%s:%s' "$SCHEME" "$HOST" "$1"; }

# curl against loopback; --noproxy so a CI-wide http_proxy is not used.
# In secure mode it trusts our CA and logs in as the superuser; the
# credentials go through a config on stdin (-K -), never on the command
# line, where every user of the machine could read them.
es_curl() {
	if ((SECURE)) && [[ -r $PASSWORD_FILE ]]; then
		local pw
		pw=$(<"$PASSWORD_FILE")
		curl -sS --noproxy '*' --cacert "$CA_CERT" -K - "$@" <<<"user = \"$SECURE_USER:$pw\""
	else
		curl -sS --noproxy '*' "$@"
	fi
}

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

# True if pid is a live JVM started from one of our distributions. Up to
# 8.19 both the CLI launcher and the server JVM carry
# -Des.path.home=<dist dir>; the server JVM of some 9.x releases does not,
# but it has -Djava.io.tmpdir=<node dir>/tmp (ES_TMPDIR). Matching on our
# ESFS_ES_HOME keeps us away from anybody else's Elasticsearch. With a node
# dir, only that node's server JVM matches.
is_ours() { # pid [node dir]
	local pid=$1 nd=${2:-} comm arg
	alive "$pid" || return 1
	read -r comm <"/proc/$pid/comm" 2>/dev/null || return 1
	[[ $comm == java ]] || return 1
	local -a args=()
	mapfile -d '' args <"/proc/$pid/cmdline" 2>/dev/null || return 1
	for arg in "${args[@]}"; do
		if [[ -n $nd ]]; then
			[[ $arg == "-Djava.io.tmpdir=$nd/tmp" ]] && return 0
		else
			[[ $arg == "-Des.path.home=$DIST_ROOT/"* || $arg == "-Djava.io.tmpdir=$RUN_DIR/esfs-"*/tmp ]] && return 0
		fi
	done
	return 1
}

# All our JVMs, found by scanning /proc (catches nodes whose pid file is gone).
scan_our_pids() { # [node dir]
	local d pid
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		is_ours "$pid" "$@" && echo "$pid"
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

# The pid of the server JVM of the node in a node dir, if it runs: from its
# pid file, or else by its tmpdir (the pid file comes late before 8.3, and
# some 9.x releases write none).
node_pid() { # node dir
	local pid
	pid=$(read_pidfile "$1/es.pid")
	if is_ours "$pid"; then
		echo "$pid"
	else
		scan_our_pids "$1" | head -n 1
	fi
}

# pids of our running nodes.
pidfile_pids() {
	local nd
	for nd in "$RUN_DIR"/esfs-*; do
		[[ -d $nd ]] && node_pid "$nd"
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

# Sets JAVA_MAJOR to the major version of a java binary's JVM (empty if
# unknown) and JAVA_HOME_OF to the JVM's own java.home.
java_major() { # java
	local props spec
	JAVA_MAJOR='' JAVA_HOME_OF=''
	[[ -x $1 ]] || return 0
	props=$("$1" -XshowSettings:properties -version 2>&1) || true
	spec=$(sed -n 's/^ *java\.specification\.version = //p' <<<"$props")
	JAVA_HOME_OF=$(sed -n 's/^ *java\.home = //p' <<<"$props")
	JAVA_MAJOR=${spec#1.} # 1.8 -> 8
	JAVA_MAJOR=${JAVA_MAJOR%%.*}
	is_uint "$JAVA_MAJOR" || JAVA_MAJOR=''
	return 0
}

# Sets JAVA_HOME_RESOLVED to a JDK >= MIN_JAVA, or dies. ES needs a JDK
# home (ES_JAVA_HOME), so for a java found on PATH we ask the JVM for its
# java.home instead of guessing from the (possibly shimmed) path.
# ESFS_ES_JAVA_HOME is taken as it is. Otherwise, when the usual JDK
# (ES_JAVA_HOME, JAVA_HOME, PATH) is too old for this version, as Java 17
# is for Elasticsearch 9, the newest JDK under /usr/lib/jvm that is new
# enough is used instead: testing 8.x and 9.x on one machine then needs no
# setting at all.
find_java() {
	local java major home what=PATH
	if [[ -n ${ESFS_ES_JAVA_HOME:-} ]]; then
		java=$ESFS_ES_JAVA_HOME/bin/java what=ESFS_ES_JAVA_HOME
	elif [[ -n ${ES_JAVA_HOME:-} ]]; then
		java=$ES_JAVA_HOME/bin/java what=ES_JAVA_HOME
	elif [[ -n ${JAVA_HOME:-} ]]; then
		java=$JAVA_HOME/bin/java what=JAVA_HOME
	elif ! java=$(command -v java); then
		java='' what=PATH
	fi
	if [[ -n $java && ! -x $java ]]; then
		die "java not found: $java does not exist (check $what)"
	fi
	JAVA_MAJOR='' JAVA_HOME_OF=''
	[[ -n $java ]] && java_major "$java"
	major=$JAVA_MAJOR home=$JAVA_HOME_OF
	if [[ -n $java && -z $major ]]; then
		die "cannot determine the version of $java"
	fi
	if [[ -z $major ]] || ((major < MIN_JAVA)); then
		local cand best='' best_major=0 m
		if [[ $what != ESFS_ES_JAVA_HOME ]]; then
			for cand in /usr/lib/jvm/*/bin/java; do
				[[ -x $cand && ! -L ${cand%/bin/java} ]] || continue
				java_major "$cand"
				m=$JAVA_MAJOR
				[[ -n $m ]] && ((m >= MIN_JAVA && m > best_major)) || continue
				best=$JAVA_HOME_OF best_major=$m
			done
		fi
		if [[ -z $best ]]; then
			[[ -n $java ]] || die "java not found (need a JDK >= $MIN_JAVA on PATH, in JAVA_HOME or ESFS_ES_JAVA_HOME)"
			die "java $major at $java is too old; Elasticsearch $ES_VERSION needs >= $MIN_JAVA (set ESFS_ES_JAVA_HOME)"
		fi
		[[ -n $java ]] && log "java $major at $java is too old for Elasticsearch $ES_VERSION; using java $best_major at $best"
		JAVA_HOME_RESOLVED=$best
		return 0
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

extract_zip() { # zip dir
	if command -v unzip >/dev/null; then
		unzip -q "$1" -d "$2" || die "unzip of $1 failed"
	elif command -v python3 >/dev/null; then
		python3 -m zipfile -e "$1" "$2" || die "unzip of $1 failed"
	else
		die "need unzip (or python3) to unpack $1"
	fi
}

# Unzip into a temp dir and rename, so an interrupted unzip never leaves a
# half-populated directory that later runs would take as cached.
ensure_dist() {
	[[ -x $DIST/bin/elasticsearch ]] && return 0
	mkdir -p "$DIST_ROOT"
	rm -rf "$DIST_ROOT"/.unzip.* # leftovers of interrupted runs (we hold the lock)
	local tmp zip
	# The secure cluster needs its own path.home (see configure), but not
	# its own bytes: hard links to the plain cluster's unzipped copy cost
	# no disk and no time. That copy is only ever created by a rename, so
	# if it is there it is complete, even without holding its lock.
	local plain=$BASE_HOME/dist/elasticsearch-$ES_VERSION
	if ((SECURE)) && [[ -x $plain/bin/elasticsearch ]]; then
		tmp=$(mktemp -d "$DIST_ROOT/.unzip.XXXXXX")
		if cp -al "$plain" "$tmp/" 2>/dev/null; then
			mv "$tmp/elasticsearch-$ES_VERSION" "$DIST"
			rm -rf "$tmp"
			return 0
		fi
		rm -rf "$tmp" # another file system, say: unzip instead
	fi
	fetch_zip
	zip=$(zip_path)
	tmp=$(mktemp -d "$DIST_ROOT/.unzip.XXXXXX")
	log "unzipping $(basename "$zip") into $DIST_ROOT"
	extract_zip "$zip" "$tmp"
	chmod +x "$tmp/elasticsearch-$ES_VERSION"/bin/* 2>/dev/null || true # python's zipfile drops modes
	[[ -x $tmp/elasticsearch-$ES_VERSION/bin/elasticsearch ]] ||
		die "$zip does not contain elasticsearch-$ES_VERSION/bin/elasticsearch"
	# The distribution stays owned by the invoking user; the node user
	# only needs to read it (per-node config copies are writable instead).
	chmod -R a+rX "$tmp/elasticsearch-$ES_VERSION"
	mv "$tmp/elasticsearch-$ES_VERSION" "$DIST"
	rm -rf "$tmp"
}

# -------------------------------------------------------------- security --

# Run one of the distribution's CLI tools (certutil, keystore) as the
# invoking user, with our JDK and none of the caller's JVM options.
es_tool() { # tool args...
	local tool=$1
	shift
	env -u JAVA_HOME -u JAVA_TOOL_OPTIONS -u _JAVA_OPTIONS -u JAVA_OPTS -u ES_JAVA_OPTS \
		ES_JAVA_HOME="$JAVA_HOME_RESOLVED" "$DIST/bin/elasticsearch-$tool" "$@" 9>&-
}

# Run a tool whose output only matters when it fails; then the last line
# of that output goes into the one-line error.
quiet_tool() { # what tool args...
	local what=$1 out
	shift
	out=$(es_tool "$@" 2>&1 </dev/null) || die "$what failed: $(tail -n 1 <<<"$out")"
}

# The CA and the node certificate, made once with elasticsearch-certutil
# (PEM, --silent) and kept across restarts, so that clients can hold on to
# the CA. A file only counts once it is in place, and the CA's certificate
# goes last: an interrupted run is simply redone. A new CA drops the node
# certificate it did not sign.
ensure_certs() {
	local tmp ca_key=$CERT_DIR/ca.key node_crt=$CERT_DIR/node.crt node_key=$CERT_DIR/node.key
	[[ -s $CA_CERT && -s $ca_key && -s $node_crt && -s $node_key ]] && return 0
	mkdir -p "$CERT_DIR"
	rm -rf "$ES_HOME_DIR"/.certs.* # leftovers of interrupted runs (we hold the lock)
	tmp=$(mktemp -d "$ES_HOME_DIR/.certs.XXXXXX") # 0700: it will hold keys
	if [[ ! -x $DIST/bin/elasticsearch-certutil ]]; then
		openssl_certs "$tmp"
		rm -rf "$tmp"
		return 0
	fi
	if [[ ! -s $CA_CERT || ! -s $ca_key ]]; then
		log "making a CA with elasticsearch-certutil"
		rm -f "$node_crt" "$node_key" "$CA_CERT"
		quiet_tool "elasticsearch-certutil ca" certutil ca --pem --silent \
			--ca-dn "CN=esfs test CA" --out "$tmp/ca.zip"
		extract_zip "$tmp/ca.zip" "$tmp"
		install -m 600 "$tmp/ca/ca.key" "$ca_key"
		install -m 644 "$tmp/ca/ca.crt" "$CA_CERT"
	fi
	if [[ ! -s $node_crt || ! -s $node_key ]]; then
		log "making the node certificate (127.0.0.1, ::1, localhost) with elasticsearch-certutil"
		quiet_tool "elasticsearch-certutil cert" certutil cert --pem --silent \
			--ca-cert "$CA_CERT" --ca-key "$ca_key" --name esfs-node \
			--ip 127.0.0.1 --ip ::1 --dns localhost --out "$tmp/node.zip"
		extract_zip "$tmp/node.zip" "$tmp"
		install -m 600 "$tmp/esfs-node/esfs-node.key" "$node_key"
		install -m 644 "$tmp/esfs-node/esfs-node.crt" "$node_crt"
	fi
	rm -rf "$tmp"
}

# The same CA and node certificate made with openssl, for the integ-test
# distributions that lack elasticsearch-certutil (8.0 to 8.2).
openssl_certs() { # tmp dir
	local tmp=$1 ca_key=$CERT_DIR/ca.key node_crt=$CERT_DIR/node.crt node_key=$CERT_DIR/node.key out
	command -v openssl >/dev/null ||
		die "Elasticsearch $ES_VERSION has no elasticsearch-certutil, and openssl (to make certificates instead) is not installed"
	if [[ ! -s $CA_CERT || ! -s $ca_key ]]; then
		log "making a CA with openssl (this distribution has no elasticsearch-certutil)"
		rm -f "$node_crt" "$node_key" "$CA_CERT"
		out=$(openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=esfs test CA" \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
			-keyout "$tmp/ca.key" -out "$tmp/ca.crt" 2>&1) || die "openssl could not make the CA: $(tail -n 1 <<<"$out")"
		install -m 600 "$tmp/ca.key" "$ca_key"
		install -m 644 "$tmp/ca.crt" "$CA_CERT"
	fi
	if [[ ! -s $node_crt || ! -s $node_key ]]; then
		log "making the node certificate (127.0.0.1, ::1, localhost) with openssl"
		printf '%s\n' "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost" "basicConstraints=CA:FALSE" \
			"keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth,clientAuth" >"$tmp/ext"
		out=$({ openssl req -newkey rsa:2048 -nodes -subj "/CN=esfs-node" -keyout "$tmp/node.key" -out "$tmp/node.csr" &&
			openssl x509 -req -days 3650 -in "$tmp/node.csr" -CA "$CA_CERT" -CAkey "$ca_key" -CAcreateserial \
				-extfile "$tmp/ext" -out "$tmp/node.crt"; } 2>&1) ||
			die "openssl could not make the node certificate: $(tail -n 1 <<<"$out")"
		install -m 600 "$tmp/node.key" "$node_key"
		install -m 644 "$tmp/node.crt" "$node_crt"
	fi
}

# The elastic user's password, random and made once, and a keystore that
# holds it as bootstrap.password (the reserved realm accepts that until a
# password is set through the API). Both stay in SECRET_DIR, readable by
# the invoking user only; the keystore is copied into each node's config.
ensure_password() {
	local pw tmp
	mkdir -p "$SECRET_DIR"
	chmod 700 "$SECRET_DIR"
	if [[ ! -s $PASSWORD_FILE ]]; then
		log "making a random password for user $SECURE_USER"
		rm -f "$KEYSTORE" # holds the old one
		# 128 bits, hex: nothing to quote in a shell, a URL or curl's config.
		pw=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
		((${#pw} == 32)) || die "could not read random bytes from /dev/urandom"
		rm -f "$PASSWORD_FILE.tmp"
		(umask 077 && printf '%s' "$pw" >"$PASSWORD_FILE.tmp")
		mv "$PASSWORD_FILE.tmp" "$PASSWORD_FILE"
	fi
	[[ -s $KEYSTORE ]] && return 0
	pw=$(<"$PASSWORD_FILE")
	rm -rf "$SECRET_DIR"/.keystore.*
	tmp=$(mktemp -d "$SECRET_DIR/.keystore.XXXXXX")
	log "making the keystore with elasticsearch-keystore"
	# -x reads the value from stdin, so it is never on a command line; -f
	# creates the keystore.
	local out
	out=$(ES_PATH_CONF=$tmp es_tool keystore add -x -f bootstrap.password 2>&1 <<<"$pw") ||
		die "elasticsearch-keystore add failed: $(tail -n 1 <<<"$out")"
	[[ -s $tmp/elasticsearch.keystore ]] || die "elasticsearch-keystore made no keystore in $tmp"
	mv "$tmp/elasticsearch.keystore" "$KEYSTORE"
	rm -rf "$tmp"
}

# The integ-test distribution lacks the analysis-common module, yet the
# security index (.security-7: API keys, native users, built-in roles) is
# created with an `email` analyzer made of three of its components: the
# uax_url_email tokenizer and the pattern_capture and unique filters.
# Without them POST /_security/api_key fails with "Unknown filter type
# [pattern_capture] for [email]". analysis-common is not on Maven Central,
# so the secure cluster gets a tiny plugin with just these three, built
# once with the JDK's javac on the Lucene classes the distribution ships.
SHIM=esfs-analysis-shim
ensure_analysis_shim() {
	local dest=$DIST/plugins/$SHIM tmp out
	local javac=$JAVA_HOME_RESOLVED/bin/javac jar=$JAVA_HOME_RESOLVED/bin/jar
	[[ -s $dest/$SHIM.jar ]] && return 0
	[[ -x $javac && -x $jar ]] ||
		die "the secure cluster needs javac and jar to build $SHIM, and $JAVA_HOME_RESOLVED is not a full JDK"
	rm -rf "$DIST_ROOT"/.shim.* # leftovers of interrupted runs (we hold the lock)
	tmp=$(mktemp -d "$DIST_ROOT/.shim.XXXXXX")
	mkdir -p "$tmp/src" "$tmp/classes" "$tmp/$SHIM"
	shim_source >"$tmp/src/AnalysisShim.java"
	log "building the $SHIM plugin with javac"
	out=$(env -u JAVA_TOOL_OPTIONS -u _JAVA_OPTIONS "$javac" --release "$MIN_JAVA" -proc:none \
		-cp "$DIST/lib/*" -d "$tmp/classes" "$tmp/src/AnalysisShim.java" 2>&1 9>&-) ||
		die "javac could not build $SHIM: $(head -n 1 <<<"$out")"
	out=$("$jar" cf "$tmp/$SHIM/$SHIM.jar" -C "$tmp/classes" . 2>&1 9>&-) ||
		die "jar could not pack $SHIM: $(head -n 1 <<<"$out")"
	cat >"$tmp/$SHIM/plugin-descriptor.properties" <<EOF
name=$SHIM
description=esfs tests: the analysis components the security index needs
version=$ES_VERSION
classname=esfs.shim.AnalysisShim
java.version=$MIN_JAVA
elasticsearch.version=$ES_VERSION
EOF
	chmod -R a+rX "$tmp/$SHIM"
	mkdir -p "$DIST/plugins"
	mv "$tmp/$SHIM" "$dest"
	rm -rf "$tmp"
}

shim_source() {
	cat <<'JAVA'
package esfs.shim;

import java.io.IOException;
import java.util.Arrays;
import java.util.Map;
import java.util.function.UnaryOperator;
import java.util.regex.Pattern;

import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.TokenFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.email.UAX29URLEmailTokenizer;
import org.apache.lucene.analysis.pattern.PatternCaptureGroupTokenFilter;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.elasticsearch.index.analysis.TokenFilterFactory;
import org.elasticsearch.index.analysis.TokenizerFactory;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/** The analysis components of the security indices that only analysis-common has. */
public class AnalysisShim extends Plugin implements AnalysisPlugin {
    @Override
    public Map<String, AnalysisProvider<TokenFilterFactory>> getTokenFilters() {
        AnalysisProvider<TokenFilterFactory> patternCapture = (index, env, name, settings) -> {
            Pattern[] patterns = settings.getAsList("patterns").stream().map(Pattern::compile).toArray(Pattern[]::new);
            boolean preserve = settings.getAsBoolean("preserve_original", true);
            return filter(name, in -> new PatternCaptureGroupTokenFilter(in, preserve, patterns));
        };
        AnalysisProvider<TokenFilterFactory> unique = (index, env, name, settings) -> filter(name, Unique::new);
        return Map.of("pattern_capture", AnalysisPlugin.requiresAnalysisSettings(patternCapture), "unique", unique);
    }

    @Override
    public Map<String, AnalysisProvider<TokenizerFactory>> getTokenizers() {
        AnalysisProvider<TokenizerFactory> uax = (index, env, name, settings) -> TokenizerFactory.newFactory(name, UAX29URLEmailTokenizer::new);
        return Map.of("uax_url_email", uax);
    }

    private static TokenFilterFactory filter(String name, UnaryOperator<TokenStream> make) {
        return new TokenFilterFactory() {
            @Override
            public String name() {
                return name;
            }

            @Override
            public TokenStream create(TokenStream in) {
                return make.apply(in);
            }
        };
    }

    /** Drops every term already seen in the stream. */
    private static final class Unique extends TokenFilter {
        private final CharTermAttribute term = addAttribute(CharTermAttribute.class);
        private final CharArraySet seen = new CharArraySet(8, false);

        Unique(TokenStream in) {
            super(in);
        }

        @Override
        public boolean incrementToken() throws IOException {
            while (input.incrementToken()) {
                if (!seen.contains(term.buffer(), 0, term.length())) {
                    seen.add(Arrays.copyOf(term.buffer(), term.length()));
                    return true;
                }
            }
            return false;
        }

        @Override
        public void reset() throws IOException {
            super.reset();
            seen.clear();
        }
    }
}
JAVA
}

ensure_security() {
	ensure_analysis_shim
	ensure_certs
	ensure_password
}

# Put certificates and keystore into a node's fresh config dir (prepare_nodes
# hands the whole dir to the node user afterwards).
install_security_files() { # config dir
	mkdir -p "$1/certs"
	install -m 644 "$CA_CERT" "$CERT_DIR/node.crt" "$1/certs/"
	install -m 600 "$CERT_DIR/node.key" "$1/certs/"
	install -m 600 "$KEYSTORE" "$1/elasticsearch.keystore"
}

# ----------------------------------------------------------------- nodes --

default_heap() { # nodes
	if ((SECURE)); then
		# Tests only: a small heap leaves room for the plain cluster.
		echo "${ESFS_ES_SECURE_HEAP:-512m}"
	elif [[ -n ${ESFS_ES_HEAP:-} ]]; then
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

# The variables that move the ports of the cluster we act on.
port_vars() {
	if ((SECURE)); then
		echo "ESFS_ES_SECURE_PORT / ESFS_ES_SECURE_TRANSPORT_PORT"
	else
		echo "ESFS_ES_PORT / ESFS_ES_TRANSPORT_PORT"
	fi
}

check_ports_free() { # nodes
	local i p who
	for ((i = 0; i < $1; i++)); do
		for p in $((HTTP_PORT + i)) $((TRANSPORT_PORT + i)); do
			if who=$(port_busy "$p"); then
				die "port $p on $HOST is already in use by $who, not by our node (set $(port_vars))"
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
		# Up to 8.18 and in 9.0, jvm.options names the GC log, the fatal
		# error log and the heap dump relative to the server's working
		# directory (the distribution, which the node user cannot write
		# to): make them the node's.
		sed -i -e "s#=logs/#=$nd/logs/#g" -e "s#^-XX:HeapDumpPath=data\$#-XX:HeapDumpPath=$nd/data#" \
			"$nd/config/jvm.options"
		((SECURE)) && install_security_files "$nd/config"
		: >"$nd/launcher.log"
		if ((EUID == 0)); then
			chown -R "$ES_USER:$(id -g "$ES_USER")" "$nd"
		fi
	done
	chmod 755 "$ES_HOME_DIR" "$RUN_DIR"
	echo "$stamp" >"$STAMP_FILE"
}

# Security settings of a node. SSL file paths are relative to the node's
# config dir, where install_security_files put them (ES only reads key
# material from inside its config dir). Transport TLS is on even for one
# node, so that --nodes N works the same (ES 8 refuses to form a secured
# multi-node cluster without it); all nodes share one certificate, which
# names 127.0.0.1, so full hostname verification holds on both layers.
security_settings() {
	if ((!SECURE)); then
		echo "xpack.security.enabled=false"
		return 0
	fi
	local layer
	echo "xpack.security.enabled=true"
	for layer in http transport; do
		echo "xpack.security.$layer.ssl.enabled=true"
		echo "xpack.security.$layer.ssl.key=certs/node.key"
		echo "xpack.security.$layer.ssl.certificate=certs/node.crt"
		echo "xpack.security.$layer.ssl.certificate_authorities=certs/ca.crt"
	done
	# On by default in ES 8; explicit because the tests depend on it.
	echo "xpack.security.authc.api_key.enabled=true"
}

# Settings for node i of n, one key=value per line.
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
cluster.routing.allocation.disk.threshold_enabled=false
EOF
	security_settings
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
			pid=$(node_pid "$(node_dir "$i")")
			if [[ -z $pid ]]; then
				# Before 8.3 the launcher returns at once with -d, before
				# the node runs: wait while any JVM of ours still runs
				# (the deadline catches the rest).
				[[ -n $(scan_our_pids) ]] || node_failed "$i" "died during startup"
				continue
			fi
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
	local pv
	pv=$(port_vars)
	check_port_number "${pv%% /*}" "$HTTP_PORT"
	check_port_number "${pv##*/ }" "$TRANSPORT_PORT"
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
				((SECURE)) && log_secure_hints
				echo "$url"
				return 0
			fi
			log "running cluster is not healthy; restarting it"
		else
			die "a $S_NODES-node Elasticsearch $S_VERSION is already running at $(url_for "$S_PORT") (wanted $NODES node(s), $ES_VERSION, $url); run 'test/es.sh stop$MODE_OPT' or 'test/es.sh restart$MODE_OPT' first"
		fi
	fi
	# Anything of ours still around at this point is stale or unhealthy.
	stop_all || true

	find_java
	ensure_dist
	((SECURE)) && ensure_security
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
	((SECURE)) && log_secure_hints
	echo "$url"
}

# Where a client finds what it needs; never the password itself.
log_secure_hints() {
	log "CA certificate: $CA_CERT"
	log "user $SECURE_USER; for the password and the rest: eval \"\$(test/es.sh secure-env)\""
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
			echo "state:   broken (process(es) ${strays[*]} of ours without pid file; run: test/es.sh stop$MODE_OPT)"
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
	if ((SECURE)); then
		echo "user:    $SECURE_USER (password: test/es.sh secure-env)"
		echo "ca:      $CA_CERT"
	fi
	[[ ($status == green || $status == yellow) && $nnodes == "$S_NODES" &&
		${#running[@]} == "$S_NODES" ]] && ok=1
	((ok)) || return 1
}

# Dies unless a cluster of ours is running; loads its state into S_*.
require_running() {
	local -a running=()
	mapfile -t running < <(pidfile_pids)
	if ! read_state || ((${#running[@]} == 0)); then
		die "not running (start it with: test/es.sh start$MODE_OPT)"
	fi
}

cmd_url() {
	require_running
	url_for "$S_PORT"
	echo
}

# Shell code for `eval`: everything esfs (and curl users) need. %q quotes
# whatever the values hold.
cmd_secure_env() {
	require_running
	[[ -r $PASSWORD_FILE ]] ||
		die "cannot read $PASSWORD_FILE (run as the user who started the secure cluster)"
	local pw
	pw=$(<"$PASSWORD_FILE")
	printf 'export %s=%q\n' \
		ELASTICSEARCH_URL "$(url_for "$S_PORT")" \
		ESFS_ES_USERNAME "$SECURE_USER" \
		ESFS_ES_PASSWORD "$pw" \
		ESFS_ES_CA_CERT "$CA_CERT"
}

# A new API key, made by the superuser through the API; prints the
# `encoded` form (base64 of id:key), which is what ESFS_ES_API_KEY takes.
cmd_api_key() { # [name]
	local name=${1:-esfs-test} body key
	[[ $name =~ ^[A-Za-z0-9_.-]{1,64}$ ]] ||
		die "api-key: the name must be 1-64 letters, digits, '_', '.' or '-', got '$name'"
	require_running
	[[ -r $PASSWORD_FILE ]] ||
		die "cannot read $PASSWORD_FILE (run as the user who started the secure cluster)"
	body=$(es_curl --max-time 30 -X POST -H 'Content-Type: application/json' \
		--data "{\"name\":\"$name\"}" "$(url_for "$S_PORT")/_security/api_key") ||
		die "cannot reach the secure cluster at $(url_for "$S_PORT")"
	key=$(json_field encoded "$body")
	[[ -n $key ]] || die "Elasticsearch did not make an API key: ${body:0:300}"
	echo "$key"
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
	if ((SECURE)); then
		log "removed $RUN_DIR (distribution, certificates and password kept in $ES_HOME_DIR)"
	else
		log "removed $RUN_DIR (distribution kept in $DIST_ROOT)"
	fi
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
	local cmd=${1:-help} arg
	(($#)) && shift
	# --secure may stand anywhere after the command; ESFS_ES_SECURE=1 is the
	# same for callers that cannot change the command line.
	case ${ESFS_ES_SECURE:-0} in
	1 | true | yes) SECURE=1 ;;
	0 | false | no | '') SECURE=0 ;;
	*) die "ESFS_ES_SECURE must be 1 or 0, got '$ESFS_ES_SECURE'" ;;
	esac
	case $cmd in secure-env | api-key) SECURE=1 ;; esac
	local -a args=()
	for arg in "$@"; do
		if [[ $arg == --secure ]]; then
			SECURE=1
		else
			args+=("$arg")
		fi
	done
	set -- "${args[@]}"
	configure
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
	secure-env) cmd_secure_env ;;
	api-key) cmd_api_key "$@" ;;
	help | -h | --help) usage ;;
	*)
		usage >&2
		die "unknown command '$cmd'"
		;;
	esac
}

main "$@"
