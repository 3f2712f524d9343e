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
#
# Extra arguments go to every chatbench run. Environment:
#   BASE_BIN   a second chatrelay binary to measure beside this tree's
#   BASE_NAME  its name in the table (default base)
#   CONFIGS    which setups to run, a space list of: root ext4j tmpfs
#              ext4j-always redis redis-aof s3big (default all)
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
#   PORT       chatrelay's port (default 18931); Redis uses PORT+1, PORT+2
#   QUIET      before each scenario, wait up to this long for the machine to
#              be idle (default 1s: it only helps when the machine
#              is about to be idle, and costs that much per scenario)
#   REPEAT     run each group this many times in a row (alternating the
#              builds); the table shows each figure's median run (default 1;
#              use an odd number)
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

quick=false
for a in "$@"; do [ "$a" = --quick ] && quick=true; done
port=${PORT:-18931}
rport_none=$((port + 1))
rport_aof=$((port + 2))
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

# Every stream is a descriptor, in the server and in chatbench.
ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d "${ROOT_DIR:-/var/tmp}/chatbench-fs.XXXXXX")
pid=""
redis_pids=()
mounts=()
cleanup() {
	set +e
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
	for p in "${redis_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
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
case " $configs " in *" redis "*) start_redis "$rport_none" "$work/redis-none" --appendonly no ;; esac
case " $configs " in *" redis-aof "*) start_redis "$rport_aof" "$work/redis-aof" --appendonly yes --appendfsync everysec ;; esac

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
	for b in "${builds[@]}"; do echo "- build ${b%%=*}: ${b#*=}"; done
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
	redis://*)
		local rp=${backend#redis://127.0.0.1:}
		rp=${rp%%/*}
		redis-cli -p "$rp" flushall >/dev/null
		store=(--store "$backend")
		local pv=redis_pid_$rp
		where=(--store "$backend" --backend-pid "${!pv}")
		;;
	*)
		data=$(mktemp -d "$backend/data.XXXXXX")
		store=(--data "$data")
		where=(--data "$data")
		;;
	esac
	"$srv" serve --addr "127.0.0.1:$port" "${store[@]}" --fsync "$mode" \
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
for c in $configs; do
	all=$groups
	no7=${groups/ S7/} # S7 (v2 with reactions) runs on tmpfs and Redis only, for time
	s1s2=""
	case " $groups " in *" S1,S2 "*) s1s2="S1,S2" ;; esac
	extra=()
	case $c in
	root) label="root fs"; backend=$work/root; mode=never; all=$no7 ;;
	ext4j) label="journaled ext4"; backend=$work/ext4j; mode=never; all=$no7 ;;
	tmpfs) label="tmpfs"; backend=$work/tmpfs; mode=never ;;
	ext4j-always) label="journaled ext4, fsync always"; backend=$work/ext4j; mode=always; all=$s1s2 ;;
	redis) label="Redis"; backend=redis://127.0.0.1:$rport_none/0; mode=never ;;
	redis-aof) label="Redis AOF everysec"; backend=redis://127.0.0.1:$rport_aof/0; mode=never; all=$s1s2 ;;
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
