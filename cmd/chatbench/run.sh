#!/usr/bin/env bash
# Reproduces the Performance table on this machine, over loopback only.
#
# Builds chatrelay (from this tree) and chatbench, mounts a journaled ext4
# image (loop device) and a tmpfs under a temporary folder, starts two
# private redis-server processes on loopback (no persistence; AOF everysec),
# then runs the scenarios on a fresh chatrelay server for each group:
#
#   root fs, journaled ext4, tmpfs (--fsync never):   S1+S2, S3, S4, S5, S6
#                                 (and S7 on tmpfs)
#   journaled ext4 with --fsync always:                S1+S2
#   Redis without persistence:                         S1+S2, S3, S4, S5, S6, S7
#   Redis with AOF everysec:                           S1+S2
#   tmpfs, S3 with S3_BIG (19 000) idle streams over 500 threads
#
# and prints one markdown table (machine, date, commit). Everything is
# unmounted, stopped and removed on exit. ~12 minutes on 2 cores.
#
#   sudo cmd/chatbench/run.sh                  # the full run
#   sudo cmd/chatbench/run.sh --quick          # a smoke run, ~3 minutes
#   sudo BASE_BIN=/tmp/chatrelay-old cmd/chatbench/run.sh
#       # two builds in one run, group by group, side by side with ratios
#       # (twice as long; narrow it with CONFIGS and SCENARIOS)
#   sudo PEERS="centrifugo ntfy" NTFY_SRC=/path/to/ntfy cmd/chatbench/run.sh
#       # the peers measured in the same run (after chatrelay's groups):
#       # Centrifugo v6 with its memory engine and with its Redis engine on a
#       # fresh private redis-server, ntfy with its SQLite cache on the
#       # journaled ext4 and on the tmpfs; a second table sets each beside
#       # chatrelay's figures with the ratio chatrelay/peer
#
# Extra arguments go to every chatbench run. Environment:
#   BASE_BIN   a second chatrelay binary to measure beside this tree's
#   BASE_NAME  its name in the table (default base)
#   CONFIGS    which setups to run, a space list of: root ext4j tmpfs
#              ext4j-always redis redis-aof s3big (default all), and
#              redis-shards (S1+S2 on two Redis shards, each pinned to a
#              core of its own with taskset; with several shards chatbench
#              reports the busiest shard's CPU per post beside the sum),
#              ext4j-log ext4j-always-log tmpfs-log (the file store with
#              --append-log; a BASE_BIN older than the flag cannot run them)
#   REDIS_CPU  percent of one core that each Redis of the redis and
#              redis-shards setups may use (a CPU quota of its own cgroup:
#              10 ms periods), so that S2 is bound by Redis on a machine
#              too small to give each shard a core and still run the
#              server and the tool: CONFIGS="redis redis-shards"
#              REDIS_CPU=12 compares one Redis with two at the same budget
#              each (default: no quota)
#   SCENARIOS  which groups to run, a space list of: S1,S2 S3 S4 S5 S6 S7
#              (default all; S1 and S2 always run together, S2 on S1's
#              subscribers)
#   S3_BIG     idle streams of the s3big setup (default 19000; the
#              descriptor limit must allow it, one per stream in each process)
#   S3_BIG_THREADS  threads they are spread over (default 500: the file
#              store keeps one descriptor open per cached thread, so streams
#              plus threads must stay under the limit)
#   OUT        results folder (default a new /tmp/chatbench.* folder):
#              results.txt, results.jsonl, results.md, server.log
#   ROOT_DIR   a folder on the root filesystem (default /var/tmp): the root
#              fs setup's data and the ext4 image and Redis files go there
#   PORT       chatrelay's port (default 18931); Redis uses PORT+1 to PORT+5
#   QUIET      before each scenario, wait up to this long for the machine to
#              be idle (default 1s: it only helps when the machine
#              is about to be idle, and costs that much per scenario)
#   REPEAT     run each group this many times in a row (alternating the
#              builds); the table shows each figure's median run (default 1;
#              use an odd number)
#   PEERS      peers to measure beside chatrelay, a space list of: centrifugo
#              (= centrifugo-memory centrifugo-redis), ntfy (= ntfy-ext4j
#              ntfy-tmpfs), or those setups by name (default none). They run
#              S1+S2, S3 and S4 of SCENARIOS (S5–S7 have no peer equivalent
#              and are reported as not run), on PORT, one at a time
#   CENTRIFUGO_BIN  a centrifugo binary (default: built from source by go
#              install github.com/centrifugal/centrifugo/v6@CENTRIFUGO_VERSION,
#              default v6.9.1, through the Go module proxy)
#   CENTRIFUGO_HISTORY  history_size of its channels (default 50; S4 reads
#              it; 0 turns history off, and S4 then fails on Centrifugo)
#   NTFY_BIN   an ntfy binary; or NTFY_SRC, a checkout of ntfy's source
#              (github.com/binwiederhier/ntfy, e.g. tag v2.13.0) that run.sh
#              builds with cgo SQLite as its Makefile's cli-linux-server does
#              (its web app left out; NTFY_VERSION names a source that is
#              not a git checkout). ntfy's module cannot be built by go
#              install: its server embeds a web app its module does not ship
set -euo pipefail
cd "$(dirname "$0")/../.."
t_start=$(date +%s)

if [ "$(id -u)" != 0 ]; then
	echo "run.sh mounts a journaled ext4 image and a tmpfs: run it as root" >&2
	exit 1
fi
for cmd in go mkfs.ext4 mount umount redis-server redis-cli; do
	command -v "$cmd" >/dev/null || { echo "run.sh needs $cmd" >&2; exit 1; }
done
peer_setups=""
for p in ${PEERS:-}; do
	case $p in
	centrifugo) peer_setups="$peer_setups centrifugo-memory centrifugo-redis" ;;
	ntfy) peer_setups="$peer_setups ntfy-ext4j ntfy-tmpfs" ;;
	centrifugo-memory | centrifugo-redis | ntfy-ext4j | ntfy-tmpfs) peer_setups="$peer_setups $p" ;;
	*) echo "PEERS: unknown peer $p (want centrifugo, ntfy or a setup of theirs)" >&2; exit 1 ;;
	esac
done
case $peer_setups in *ntfy*)
	if [ -z "${NTFY_BIN:-}" ] && [ -z "${NTFY_SRC:-}" ]; then
		echo "PEERS ntfy: set NTFY_BIN to an ntfy binary or NTFY_SRC to its source (see the top of run.sh)" >&2
		exit 1
	fi
	command -v gcc >/dev/null || [ -n "${NTFY_BIN:-}" ] || { echo "building ntfy needs gcc (cgo SQLite)" >&2; exit 1; }
	;;
esac

quick=false
for a in "$@"; do [ "$a" = --quick ] && quick=true; done
port=${PORT:-18931}
rport_none=$((port + 1))
rport_aof=$((port + 2))
rport_peer=$((port + 3))
rport_shard0=$((port + 4)) # and +5: the redis-shards setup's two
out=${OUT:-$(mktemp -d /tmp/chatbench.XXXXXX)}
mkdir -p "$out"
configs=${CONFIGS:-root ext4j tmpfs ext4j-always redis redis-aof s3big}
groups=""
for g in ${SCENARIOS:-S1,S2 S3 S4 S5 S6 S7}; do
	case $g in S1 | S2 | S1,S2 | S2,S1) g=S1,S2 ;; S3 | S4 | S5 | S6 | S7) ;; *) echo "SCENARIOS: unknown group $g" >&2; exit 1 ;; esac
	case " $groups " in *" $g "*) ;; *) groups="$groups $g" ;; esac
done
s3big=${S3_BIG:-19000}
if $quick && [ -z "${S3_BIG:-}" ]; then s3big=800; fi
quiet=${QUIET:-1s}
repeat=${REPEAT:-1}

bin=$out/bin
go build -o "$bin/chatrelay" ./cmd/chatrelay
go build -o "$bin/chatbench" ./cmd/chatbench
builds=("new=$bin/chatrelay")
if [ -n "${BASE_BIN:-}" ]; then
	[ -x "$BASE_BIN" ] || { echo "BASE_BIN $BASE_BIN is not an executable" >&2; exit 1; }
	builds+=("${BASE_NAME:-base}=$BASE_BIN")
fi
centrifugo_bin=${CENTRIFUGO_BIN:-}
ntfy_bin=${NTFY_BIN:-}
case $peer_setups in *centrifugo*)
	if [ -z "$centrifugo_bin" ]; then
		cv=${CENTRIFUGO_VERSION:-v6.9.1}
		GOBIN=$bin GOFLAGS=-mod=mod go install -ldflags "-X github.com/centrifugal/centrifugo/v6/internal/build.Version=${cv#v}" \
			"github.com/centrifugal/centrifugo/v6@$cv"
		centrifugo_bin=$bin/centrifugo
	fi
	[ -x "$centrifugo_bin" ] || { echo "CENTRIFUGO_BIN $centrifugo_bin is not an executable" >&2; exit 1; }
	;;
esac
case $peer_setups in *ntfy*)
	if [ -z "$ntfy_bin" ]; then
		# As ntfy's Makefile (cli-deps-static-sites, cli-linux-server), in a
		# copy of the source: empty placeholders for the web app and docs.
		rm -rf "$out/ntfy-src"
		cp -r "$NTFY_SRC" "$out/ntfy-src"
		mkdir -p "$out/ntfy-src/server/site" "$out/ntfy-src/server/docs"
		touch "$out/ntfy-src/server/site/app.html" "$out/ntfy-src/server/docs/index.html"
		ntfy_version=$(git -C "$NTFY_SRC" describe --tags 2>/dev/null || echo "${NTFY_VERSION:-source}")
		(cd "$out/ntfy-src" && CGO_ENABLED=1 go build -o "$bin/ntfy" -tags sqlite_omit_load_extension,osusergo,netgo \
			-ldflags "-X main.version=${ntfy_version#v}" .)
		ntfy_bin=$bin/ntfy
	fi
	[ -x "$ntfy_bin" ] || { echo "NTFY_BIN $ntfy_bin is not an executable" >&2; exit 1; }
	;;
esac

# Every stream is a descriptor, in the server and in chatbench.
ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d "${ROOT_DIR:-/var/tmp}/chatbench-fs.XXXXXX")
pid=""
redis_pids=()
mounts=()
cgroups=()
cleanup() {
	set +e
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
	for p in "${redis_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	for g in "${cgroups[@]}"; do rmdir "$g"; done
	for m in "${mounts[@]}"; do umount "$m"; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$work/root" "$work/ext4j" "$work/tmpfs"
# The journaled ext4: a sparse image on the root fs, through a loop device
# (mount -o loop detaches it again on umount).
truncate -s 8G "$work/ext4.img"
mkfs.ext4 -q -F -O has_journal "$work/ext4.img"
mount -o loop "$work/ext4.img" "$work/ext4j"
mounts+=("$work/ext4j")
mount -t tmpfs -o size=4g,mode=0700 chatbench "$work/tmpfs"
mounts+=("$work/tmpfs")

# start_redis PORT DIR ARGS...: a private redis-server on loopback; its
# pid goes to redis_pid_PORT.
start_redis() {
	local p=$1 dir=$2
	shift 2
	mkdir -p "$dir"
	redis-server --port "$p" --bind 127.0.0.1 --dir "$dir" --save "" --daemonize no \
		--logfile "$dir/redis.log" "$@" &
	redis_pids+=($!)
	printf -v "redis_pid_$p" %s $!
	for _ in $(seq 100); do
		redis-cli -p "$p" ping >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "redis-server on port $p did not start: $(tail -5 "$dir/redis.log")" >&2
	exit 1
}
# cap_cpu PID NAME: with REDIS_CPU, PID may use REDIS_CPU % of one core
# (a cgroup of its own, cgroup v1's cpu controller or v2's cpu.max).
cap_cpu() {
	[ -n "${REDIS_CPU:-}" ] || return 0
	local quota=$((REDIS_CPU * 100)) g # µs of CPU per 10 000 µs
	if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
		g=/sys/fs/cgroup/cpu/chatbench-$$-$2
		mkdir "$g"
		echo 10000 >"$g/cpu.cfs_period_us"
		echo "$quota" >"$g/cpu.cfs_quota_us"
	elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
		g=/sys/fs/cgroup/chatbench-$$-$2
		mkdir "$g"
		echo "$quota 10000" >"$g/cpu.max"
	else
		echo "REDIS_CPU: no cgroup CPU controller (cgroup v1 cpu or v2 cpu.max) to cap Redis with" >&2
		exit 1
	fi
	cgroups+=("$g")
	echo "$1" >"$g/cgroup.procs"
}
case ${REDIS_CPU:-} in '' | [1-9] | [1-9][0-9] | 100) ;; *) echo "REDIS_CPU: a percent of one core, 1 to 100" >&2; exit 1 ;; esac
case " $configs " in *" redis "*)
	start_redis "$rport_none" "$work/redis-none" --appendonly no
	pv=redis_pid_$rport_none
	cap_cpu "${!pv}" none
	;;
esac
case " $configs " in *" redis-aof "*) start_redis "$rport_aof" "$work/redis-aof" --appendonly yes --appendfsync everysec ;; esac
case $peer_setups in *centrifugo-redis*) start_redis "$rport_peer" "$work/redis-peer" --appendonly no ;; esac
case " $configs " in *" redis-shards "*)
	# Shard k on core k where the machine has the cores (the server and
	# the tool share every core: 2 are not enough to keep them off the
	# shards' cores).
	for k in 0 1; do
		p=$((rport_shard0 + k))
		start_redis "$p" "$work/redis-shard$k" --appendonly no
		pv=redis_pid_$p
		if command -v taskset >/dev/null && [ "$(nproc)" -gt "$k" ]; then taskset -p -c "$k" "${!pv}" >/dev/null; fi
		cap_cpu "${!pv}" "shard$k"
	done
	;;
esac

# fs_of DIR: "ext4 (no journal), /dev/vda" and the like.
fs_of() {
	local type dev
	read -r type dev < <(df -T "$1" | awk 'NR==2 {print $2, $1}')
	if [ "$type" = ext4 ]; then
		if ls /proc/fs/jbd2/ 2>/dev/null | grep -q "^$(basename "$dev")-"; then
			type="ext4 with a journal"
		else
			type="ext4 without a journal"
		fi
	fi
	echo "$type, $dev"
}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo "${COMMIT:-unknown}")
if git rev-parse --git-dir >/dev/null 2>&1 && ! git diff --quiet HEAD --; then commit="$commit (work tree modified)"; fi
{
	echo "**chatbench run** $(date -u '+%Y-%m-%d %H:%M UTC'), commit \`$commit\`"
	echo
	echo "- machine: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(uname -sr), $(go version | awk '{print $3}'); open files $(ulimit -n)"
	echo "- root fs: $(fs_of "$work/root"); journaled ext4: $(fs_of "$work/ext4j") (an image on the root fs); tmpfs"
	echo "- Redis: $(redis-server --version | awk '{print $3}' | sed 's/^v=//'), private, on loopback; \"Redis\": no RDB, no AOF; \"AOF everysec\": appendonly, appendfsync everysec; its CPU is measured beside the server's"
	if [ -n "${REDIS_CPU:-}" ]; then echo "- REDIS_CPU=$REDIS_CPU: each Redis of the redis and redis-shards setups in a cgroup of its own with a CPU quota of $((REDIS_CPU * 100)) µs every 10 ms ($REDIS_CPU % of a core), so that S2 is bound by Redis"; fi
	for b in "${builds[@]}"; do echo "- build ${b%%=*}: ${b#*=}"; done
	case $peer_setups in *centrifugo*)
		echo "- peer Centrifugo $("$centrifugo_bin" version 2>/dev/null | head -1) ($centrifugo_bin): server API publish, uni_sse and uni_websocket with HS256 connection tokens (\`channels\` claim), history_size ${CENTRIFUGO_HISTORY:-50} (ttl 300s); memory engine, and Redis engine on a private redis-server (no persistence)" ;;
	esac
	case $peer_setups in *ntfy*)
		echo "- peer ntfy $("$ntfy_bin" --help 2>&1 | awk '/^ntfy [0-9]/ {print $2; exit}') ($ntfy_bin): SQLite cache-file on the filesystem measured, tuned as its docs tune ntfy.sh (WAL, synchronous normal, batches of 25 / 1 s); visitor limits raised for loopback" ;;
	esac
	echo "- chatbench flags: ${*:-(defaults)}"
} >"$out/header.md"
cat "$out/header.md"

# bench BUILD BIN LABEL BACKEND FSYNC GROUP [chatbench flags...]: one
# group of scenarios on a fresh server. BACKEND is a folder (a fresh data
# folder is made in it) or redis://… (flushed first).
bench() {
	local build=$1 srv=$2 label=$3 backend=$4 mode=$5 group=$6
	shift 6
	local store=() where=() data=""
	case $backend in
	redis://*) # one Redis, or shards: redis://…,redis://…
		local u rp pv pids=()
		for u in ${backend//,/ }; do
			rp=${u#redis://127.0.0.1:}
			rp=${rp%%/*}
			redis-cli -p "$rp" flushall >/dev/null
			pv=redis_pid_$rp
			pids+=("${!pv}")
		done
		store=(--store "$backend")
		where=(--store "$backend" --backend-pid "$(IFS=,; echo "${pids[*]}")")
		;;
	*)
		data=$(mktemp -d "$backend/data.XXXXXX")
		store=(--data "$data")
		where=(--data "$data")
		;;
	esac
	"$srv" serve --addr "127.0.0.1:$port" "${store[@]}" --fsync "$mode" "${srvflags[@]}" \
		--rate-thread 1000000000 --rate-ip 1000000000 --max-threads 1000000 \
		--max-streams-per-thread 100000 --max-streams-per-ip 1000000 \
		--log-level warn >>"$out/server.log" 2>&1 &
	pid=$!
	"$bin/chatbench" --server "http://127.0.0.1:$port" --server-pid "$pid" \
		--label "$label" --build "$build" --scenario "$group" --quiet-wait "$quiet" \
		--chatrelay-bin "$srv" "${where[@]}" --reply-fsync "$mode" --timeout 6m \
		--json-out "$out/results.jsonl" "$@" | tee -a "$out/results.txt" || true
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
	if [ -n "$data" ]; then rm -rf "$data"; fi
}

# config NAME: label, backend, fsync mode and groups of a setup.
capped=""
if [ -n "${REDIS_CPU:-}" ]; then capped=", each Redis at ${REDIS_CPU} % of a core"; fi
for c in $configs; do
	all=$groups
	no7=${groups/ S7/} # S7 (v2 with reactions) runs on tmpfs and Redis only, for time
	s1s2=""
	case " $groups " in *" S1,S2 "*) s1s2="S1,S2" ;; esac
	extra=()
	srvflags=()
	case $c in
	root) label="root fs"; backend=$work/root; mode=never; all=$no7 ;;
	ext4j) label="journaled ext4"; backend=$work/ext4j; mode=never; all=$no7 ;;
	tmpfs) label="tmpfs"; backend=$work/tmpfs; mode=never ;;
	ext4j-always) label="journaled ext4, fsync always"; backend=$work/ext4j; mode=always; all=$s1s2 ;;
	ext4j-log) label="journaled ext4, --append-log"; backend=$work/ext4j; mode=never; all=$no7; srvflags=(--append-log) ;;
	ext4j-always-log) label="journaled ext4, fsync always, --append-log"; backend=$work/ext4j; mode=always; all=$s1s2; srvflags=(--append-log) ;;
	tmpfs-log) label="tmpfs, --append-log"; backend=$work/tmpfs; mode=never; srvflags=(--append-log) ;;
	redis) label="Redis$capped"; backend=redis://127.0.0.1:$rport_none/0; mode=never ;;
	redis-aof) label="Redis AOF everysec"; backend=redis://127.0.0.1:$rport_aof/0; mode=never; all=$s1s2 ;;
	redis-shards) label="Redis, 2 shards$capped"; backend=redis://127.0.0.1:$rport_shard0/0,redis://127.0.0.1:$((rport_shard0 + 1))/0; mode=never; all=$s1s2 ;;
	s3big) label="tmpfs"; backend=$work/tmpfs; mode=never; all=S3
		extra=(--idle "$s3big" --idle-threads "${S3_BIG_THREADS:-$((s3big < 1000 ? s3big / 2 : 500))}")
		[ "$s3big" -gt 0 ] || continue
		case " $groups " in *" S3 "*) ;; *) continue ;; esac ;;
	*) echo "CONFIGS: unknown setup $c" >&2; exit 1 ;;
	esac
	for g in $all; do
		for _ in $(seq "$repeat"); do
			for b in "${builds[@]}"; do
				bench "${b%%=*}" "${b#*=}" "$label" "$backend" "$mode" "$g" "${extra[@]}" "$@"
			done
		done
	done
done

# peer_bench SETUP GROUP: one group of scenarios on a fresh peer server.
peer_bench() {
	local setup=$1 group=$2 target label versus data="" conf be=() args=()
	shift 2
	case $setup in
	centrifugo-memory) target=centrifugo; label="memory"; versus=tmpfs ;;
	centrifugo-redis) target=centrifugo; label="Redis"; versus=Redis ;;
	ntfy-ext4j) target=ntfy; label="journaled ext4"; versus="journaled ext4" ;;
	ntfy-tmpfs) target=ntfy; label="tmpfs"; versus=tmpfs ;;
	esac
	case $setup in
	centrifugo-*)
		# Keys of this run only; the server listens on loopback only.
		local key secret engine='{"type": "memory"}'
		key=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
		secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
		if [ "$setup" = centrifugo-redis ]; then
			redis-cli -p "$rport_peer" flushall >/dev/null
			engine="{\"type\": \"redis\", \"redis\": {\"address\": [\"redis://127.0.0.1:$rport_peer\"]}}"
			be=(--backend-pid "$redis_pid_peer")
		fi
		conf=$work/centrifugo.json
		cat >"$conf" <<-JSON
			{
			  "http_server": {"address": "127.0.0.1", "port": $port},
			  "log": {"level": "warn"},
			  "usage_stats": {"disabled": true},
			  "client": {"token": {"hmac_secret_key": "$secret"}},
			  "http_api": {"key": "$key"},
			  "uni_sse": {"enabled": true},
			  "uni_websocket": {"enabled": true},
			  "channel": {"without_namespace": {"history_size": ${CENTRIFUGO_HISTORY:-50}, "history_ttl": "300s"}},
			  "engine": $engine
			}
		JSON
		"$centrifugo_bin" --config "$conf" >>"$out/server.log" 2>&1 &
		args=(--peer-api-key "$key" --peer-hmac-secret "$secret")
		;;
	ntfy-*)
		local fsdir=$work/ext4j
		[ "$setup" = ntfy-tmpfs ] && fsdir=$work/tmpfs
		data=$(mktemp -d "$fsdir/ntfy.XXXXXX")
		conf=$data/server.yml
		cat >"$conf" <<-YML
			listen-http: "127.0.0.1:$port"
			cache-file: "$data/cache.db"
			cache-batch-size: 25
			cache-batch-timeout: "1s"
			cache-startup-queries: |
			  pragma journal_mode = WAL;
			  pragma synchronous = normal;
			  pragma temp_store = memory;
			  pragma busy_timeout = 15000;
			  vacuum;
			visitor-request-limit-exempt-hosts: "127.0.0.0/8"
			visitor-subscription-limit: 1000000
			global-topic-limit: 1000000
			log-level: warn
		YML
		"$ntfy_bin" serve --config "$conf" >>"$out/server.log" 2>&1 &
		;;
	esac
	pid=$!
	"$bin/chatbench" --server "http://127.0.0.1:$port" --server-pid "$pid" "${be[@]}" \
		--target "$target" --versus "$versus" "${args[@]}" \
		--label "$label" --scenario "$group" --quiet-wait "$quiet" --timeout 6m \
		--json-out "$out/results.jsonl" "$@" | tee -a "$out/results.txt" || true
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
	if [ -n "$data" ]; then rm -rf "$data"; fi
}
redis_pid_peer=""
if [ -n "$peer_setups" ]; then
	pv=redis_pid_$rport_peer
	redis_pid_peer=${!pv:-}
fi
for setup in $peer_setups; do
	skip=""
	for g in $groups; do
		case $g in
		S1,S2 | S3 | S4)
			for _ in $(seq "$repeat"); do peer_bench "$setup" "$g" "$@"; done ;;
		*) skip="$skip,$g" ;;
		esac
	done
	# Named as not run in the results (chatbench answers them at once).
	if [ -n "$skip" ]; then peer_bench "$setup" "${skip#,}" "$@"; fi
done

main_build=new
"$bin/chatbench" report --main "$main_build" "$out/results.jsonl" >"$out/table.md"
{
	cat "$out/header.md"
	echo "- run.sh took $(( ($(date +%s) - t_start) / 60 )) min $(( ($(date +%s) - t_start) % 60 )) s"
	echo
	cat "$out/table.md"
} >"$out/results.md"
echo
cat "$out/results.md"
echo
echo "# results in $out/results.md, results.txt and results.jsonl"
