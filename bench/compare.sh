#!/usr/bin/env bash
# sluice side by side with nginx, haproxy and Portkey's AI gateway, in one
# run, all in front of the same zero-delay mock llama-server:
#
#   bench/compare.sh
#
# Peers (PEERS, default all of them; a subset by name, space-separated):
#   direct        the mock itself, no gateway: the baseline of added latency,
#                 always measured
#   sluice        build/sluice (SLUICE) as it comes: the default batch window
#                 and --stream-upstream (auto: plain answers relayed), its
#                 access log on (info, to a file)
#   sluice-streams  the same with --stream-upstream on: plain answers asked
#                 for as streams and assembled, as auto does for a while
#                 after a client left one
#   nginx         Debian's nginx: one worker, keep-alive to the mock, the
#                 access log to a file, proxy_buffering off
#   haproxy       Debian's haproxy: one thread, mode http, http-reuse always,
#                 option httplog to a file
#   portkey       Portkey's AI gateway (npm @portkey-ai/gateway) on node
#
# Each round measures every peer in turn, so that drift on a shared machine
# hits them all alike: ROUNDS (default 2) rounds, in each five
# measurements per peer of DURATION (default 3) seconds, the first with as
# many seconds of the mock alone beside it:
#   1. plain answers at concurrency 1 (wrk -t1 -c1 --latency), in slices
#      of one second, each through the peer right after one to the mock
#      alone: the peer's p50 and p99 less the mock's, the median of the
#      pairs, is the latency the path adds;
#   2. plain answers at concurrency 32 (wrk -t1 -c32): requests/s, and the
#      gateway's CPU time (/proc/PID/stat utime+stime, nginx's worker
#      included) divided by the requests answered;
#   3. streams of 64 tokens at concurrency 32 (wrk, which reads each stream
#      whole): streams/s and the gateway's CPU per relayed token;
#   4. the same with sluice-bench, which times each event: time to first
#      token p50 (sluice-bench's own work per event holds it to a tenth of
#      the streams/s wrk reaches, so at this load it waits on the client);
#   5. streams at concurrency 1 (sluice-bench): time to first token p50.
# "Plain" is POST /v1/chat/completions, a small JSON body, 16 tokens.
#
# Run as root, the script installs what is missing (apt-get: wrk, nginx,
# haproxy; npm: Portkey into $XDG_CACHE_HOME/sluice/portkey); a peer that
# cannot be had is skipped, and the output says why. Results: a Markdown
# table on stdout and in $SLUICE_BENCH_OUT (default bench/results)/compare.md,
# every figure per round in compare.json, and a plot, compare.svg. The load
# generator, the gateways and the mock share the machine's cores; only the
# runs at concurrency 1 are pinned (C1_CPU, below), unless GATEWAY_CPU
# (below) pins the loaded ones too. Portkey needs node (20 is what it was
# measured on) and npm; without them it is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${SLUICE_BENCH_OUT:-bench/results}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-3}
PEERS=${PEERS:-direct sluice sluice-streams nginx haproxy portkey}
SLUICE=${SLUICE:-build/sluice}
BENCH=build/bench/sluice-bench
MOCK=build/bench/mock-llama-server
HERE=bench/compare
PORTKEY_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/sluice/portkey
PORTKEY_MAIN=$PORTKEY_DIR/node_modules/@portkey-ai/gateway/build/start-server.js
# Concurrency of the loaded runs (report.py calls it c=32), and tokens
# per streamed answer.
LOAD_CONCURRENCY=32
STREAM_TOKENS=64
# A run that has not ended this long after its DURATION has hung.
RUN_GRACE_S=60
# Latency at concurrency 1 is timed with the load generator, the gateway
# and the mock on one CPU, C1_CPU (default 0; "none" leaves them where the
# scheduler puts them). Unpinned, on a 2-vCPU virtual machine the mock's
# own p50 jumps between about 11 and 75 µs from one run to the next: 11
# when wrk and the mock share a vCPU, 75 when each wakeup crosses to the
# other, idle one; the difference of two such runs says little about a
# gateway. Every other run is left unpinned.
C1_CPU=${C1_CPU:-0}
# The loaded runs (2-4 above) with the gateway alone on CPU GATEWAY_CPU
# and the load generator and the mock on the other CPUs (for direct, the
# mock takes the gateway's CPU); default "none", where the scheduler
# places them. Unpinned, on two vCPUs, which process shares a vCPU with
# which changes from run to run, and one peer's ratio to another moved
# between 0.66 and 1.52 from round to round; pinned, each gateway gets
# the same core, as one a deployment dedicates to its gateway would.
GATEWAY_CPU=${GATEWAY_CPU:-none}
# Debian keeps nginx and haproxy in sbin, which a user's PATH may lack.
PATH=$PATH:/usr/sbin:/sbin

mkdir -p "$OUT"
work=$(mktemp -d)
mkdir -p "$work/skipped" "$work/versions"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"' EXIT
declare -A pid port

say() { printf '\n== %s\n' "$*" >&2; }

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wanted() { [[ " $PEERS " == *" $1 "* ]]; }

# skip PEER REASON: leaves the peer out of the run and says why.
skip() {
	echo "$2" >"$work/skipped/$1"
	echo "bench/compare.sh: skipping $1: $2" >&2
}

skipped() { [ -e "$work/skipped/$1" ]; }

# family PID: the process and its children (nginx's master and worker).
family() {
	local children
	# One line of space-separated PIDs per thread.
	read -ra children <<<"$(cat "/proc/$1/task/"*/children 2>/dev/null | tr "\n" " ")"
	echo "$1" "${children[@]}"
}

# CPU clock ticks (user+system) of a process and of its children. The
# fields are counted from the end of the command name, which may hold
# spaces.
cpu_ticks() {
	local files=() p
	for p in $(family "$1"); do files+=("/proc/$p/stat"); done
	awk '{ sub(/.*\) /, ""); t += $12 + $13 } END { print t }' "${files[@]}"
}

# set_affinity PEER CPUS: moves the peer's processes, all their threads,
# to the CPUs listed.
set_affinity() {
	local p
	for p in $(family "${pid[$1]}"); do
		# A process that has exited has no affinity left to set.
		taskset -a -cp "$2" "$p" >/dev/null 2>&1 || true
	done
}

apt_get() {
	DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 "$@"
}

install_packages() {
	local want=() tool
	command -v wrk >/dev/null || want+=(wrk)
	for tool in nginx haproxy; do
		if wanted "$tool" && ! command -v "$tool" >/dev/null; then
			want+=("$tool")
		fi
	done
	[ ${#want[@]} -gt 0 ] || return 0
	if [ "$(id -u)" -ne 0 ]; then
		echo "bench/compare.sh: not root: not installing ${want[*]}" >&2
		return 0
	fi
	say "installing ${want[*]} (apt-get)"
	# A stale package list may name versions the mirror no longer has.
	if ! apt_get install -y --no-install-recommends "${want[@]}" \
		>"$work/apt.log" 2>&1; then
		apt_get update >>"$work/apt.log" 2>&1 || true
		apt_get install -y --no-install-recommends "${want[@]}" \
			>>"$work/apt.log" 2>&1 || tail -n 3 "$work/apt.log" >&2
	fi
}

# Portkey, with its dependencies as bench/compare/portkey-package.json pins
# them, in the cache directory; reinstalled when that file changes.
install_portkey() {
	if ! command -v node >/dev/null; then
		skip portkey "node is not installed (Debian: apt-get install nodejs npm)"
		return
	fi
	if cmp -s "$HERE/portkey-package.json" "$PORTKEY_DIR/package.json" &&
		[ -f "$PORTKEY_MAIN" ]; then
		return
	fi
	if ! command -v npm >/dev/null; then
		skip portkey "npm is not installed"
		return
	fi
	say "installing Portkey's gateway into $PORTKEY_DIR (npm)"
	mkdir -p "$PORTKEY_DIR"
	cp "$HERE/portkey-package.json" "$PORTKEY_DIR/package.json"
	# Its postinstall step, patch-package, has no patches to apply.
	if ! (cd "$PORTKEY_DIR" && npm install --no-audit --no-fund \
		--ignore-scripts) >"$work/npm.log" 2>&1 || [ ! -f "$PORTKEY_MAIN" ]; then
		rm -f "$PORTKEY_DIR/package.json"
		skip portkey "npm install failed: $(grep -m 2 'npm error' "$work/npm.log" | paste -sd ' ')"
	fi
}

# start NAME COMMAND...: runs it in the background, logging to $work/NAME.log.
start() {
	local name=$1
	shift
	"$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	pid[$name]=$!
}

# wait_ready NAME URL [CURL-OPTION]...: until URL answers, or NAME exits
# (then NAME is skipped, with the last line it logged).
wait_ready() {
	local name=$1 url=$2
	shift 2
	for _ in $(seq 600); do
		curl -s -o /dev/null --max-time 1 "$@" "$url" && return 0
		kill -0 "${pid[$name]}" 2>/dev/null || break
		sleep 0.1
	done
	kill "${pid[$name]}" 2>/dev/null || true
	skip "$name" "it did not start: $(tail -n 1 "$work/$name.log")"
	return 1
}

# fill TEMPLATE OUTPUT PORT: a config with @DIR@, @PORT@, @MOCK_PORT@ filled in.
fill() {
	sed -e "s#@DIR@#$work#g" -e "s#@PORT@#$3#g" \
		-e "s#@MOCK_PORT@#${port[direct]}#g" "$1" >"$2"
}

# The version, and the last commit that changed sluice's sources (with
# "+changes" when the tree differs from it).
sluice_version() {
	local commit
	commit=$(git log -1 --format=%h -- src include 2>/dev/null) || commit=unknown
	git diff --quiet HEAD -- src include 2>/dev/null || commit+=+changes
	echo "$("$SLUICE" --version | cut -d' ' -f1-2) (src/ at $commit)"
}

start_peer() {
	local name=$1 p
	p=$(free_port)
	port[$name]=$p
	case $name in
	sluice | sluice-streams)
		local extra=()
		[ "$name" = sluice-streams ] && extra=(--stream-upstream on)
		# Access lines are logged at info, sluice's default level.
		start "$name" "$SLUICE" --listen "127.0.0.1:$p" \
			--upstream "http://127.0.0.1:${port[direct]}" \
			--slots-per-upstream 4096 "${extra[@]}"
		wait_ready "$name" "http://127.0.0.1:$p/ready" -f || return 0
		sluice_version >"$work/versions/sluice"
		;;
	nginx)
		mkdir -p "$work/nginx"
		fill "$HERE/nginx.conf.in" "$work/nginx.conf" "$p"
		start nginx nginx -p "$work/nginx" -c "$work/nginx.conf" \
			-e "$work/nginx-error.log"
		wait_ready nginx "http://127.0.0.1:$p/health" || return 0
		nginx -v 2>&1 | sed 's/^nginx version: //' >"$work/versions/nginx"
		;;
	haproxy)
		fill "$HERE/haproxy.cfg.in" "$work/haproxy.cfg" "$p"
		start haproxy haproxy -db -f "$work/haproxy.cfg"
		wait_ready haproxy "http://127.0.0.1:$p/health" || return 0
		haproxy -v | sed -n '1s/^HAProxy version \([^ ]*\).*/haproxy \1/p' >"$work/versions/haproxy"
		;;
	portkey)
		# Portkey's server takes a port but no address: it listens on
		# every interface.
		COMPARE_PORTKEY_HOST="http://127.0.0.1:${port[direct]}/v1" \
			start portkey node --require "$PWD/$HERE/portkey-headers.cjs" \
			"$PORTKEY_MAIN" --port="$p" --headless
		wait_ready portkey "http://127.0.0.1:$p/" -f || return 0
		printf '@portkey-ai/gateway %s (@hono/node-server %s) on node %s\n' \
			"$(node -p "require('$PORTKEY_DIR/node_modules/@portkey-ai/gateway/package.json').version")" \
			"$(node -p "require('$PORTKEY_DIR/node_modules/@hono/node-server/package.json').version")" \
			"$(node --version)" >"$work/versions/portkey"
		;;
	*) skip "$name" "no such peer (PEERS names them)" ;;
	esac
}

# wrk_chat PEER CONNECTIONS TOKENS STREAM OUTPUT-JSON: chat completions for
# DURATION seconds, plain (STREAM off) or streamed (on).
wrk_chat() {
	local host=""
	[ "$1" = portkey ] && host="http://127.0.0.1:${port[direct]}/v1"
	COMPARE_PORTKEY_HOST=$host COMPARE_MAX_TOKENS=$3 COMPARE_STREAM=$4 \
		COMPARE_WRK_OUT=$5 timeout $((DURATION + RUN_GRACE_S)) \
		"${pinned[@]}" wrk -t1 -c"$2" -d"${DURATION}s" --latency -s "$HERE/chat.lua" \
		"http://127.0.0.1:${port[$1]}/v1/chat/completions" \
		>"${5%.json}.txt" 2>&1 || true
}

# bench_stream PEER CONCURRENCY OUTPUT-JSON: streams for DURATION seconds,
# timed event by event.
bench_stream() {
	timeout $((DURATION + RUN_GRACE_S)) "${pinned[@]}" "$BENCH" --quiet on \
		--url "http://127.0.0.1:${port[$1]}" --endpoint chat --stream on \
		--max-tokens "$STREAM_TOKENS" --concurrency "$2" \
		--duration "$DURATION" --requests 100000000 --timeout 30 \
		--json "$3" >"${3%.json}.txt" 2>&1 || true
}

# ticks PEER: CPU ticks of the peer's process (the mock's, for direct).
ticks() { cpu_ticks "${pid[$1]}"; }

# with_cpu PEER OUTPUT-JSON COMMAND...: runs COMMAND, and writes the CPU
# ticks that the peer and the mock spent meanwhile.
with_cpu() {
	local peer=$1 out=$2 g0 m0
	shift 2
	g0=$(ticks "$peer") m0=$(ticks direct)
	"$@"
	printf '{"gateway_ticks": %d, "mock_ticks": %d}\n' \
		$(($(ticks "$peer") - g0)) $(($(ticks direct) - m0)) >"$out"
}

# measure PEER ROUND: the runs of one peer in one round, their figures in
# $work/rROUND-PEER-*.json.
measure() {
	local peer=$1 stem=$work/r$2-$1 slice
	if [ "$C1_CPU" != none ]; then
		set_affinity direct "$C1_CPU"
		set_affinity "$peer" "$C1_CPU"
		pinned=(taskset -c "$C1_CPU")
	fi
	# Latency at concurrency 1 drifts with what else the machine runs: one
	# second of the mock alone, then one of the peer, DURATION times over;
	# each pair sees one drift, and the median pair leaves out a second
	# that another process took.
	for slice in $(seq "$DURATION"); do
		if [ "$peer" != direct ]; then
			DURATION=1 wrk_chat direct 1 16 off "$stem-base-c1-$slice.json"
		fi
		DURATION=1 wrk_chat "$peer" 1 16 off "$stem-c1-$slice.json"
	done
	if [ "$C1_CPU" != none ]; then
		set_affinity direct "$all_cpus"
		set_affinity "$peer" "$all_cpus"
		pinned=()
	fi
	if [ "$GATEWAY_CPU" != none ]; then
		set_affinity direct "$load_cpus"
		set_affinity "$peer" "$GATEWAY_CPU"
		pinned=(taskset -c "$load_cpus")
	fi
	with_cpu "$peer" "$stem-c32-cpu.json" \
		wrk_chat "$peer" "$LOAD_CONCURRENCY" 16 off "$stem-c32.json"
	with_cpu "$peer" "$stem-w32-cpu.json" \
		wrk_chat "$peer" "$LOAD_CONCURRENCY" "$STREAM_TOKENS" on "$stem-w32.json"
	bench_stream "$peer" "$LOAD_CONCURRENCY" "$stem-s32.json"
	if [ "$GATEWAY_CPU" != none ]; then
		set_affinity direct "$all_cpus"
		set_affinity "$peer" "$all_cpus"
		pinned=()
	fi
	bench_stream "$peer" 1 "$stem-s1.json"
}

for tool in "$BENCH" "$MOCK" "$SLUICE"; do
	if [ ! -x "$tool" ]; then
		echo "bench/compare.sh: $tool is missing; build first (./deploy/setup.sh)" >&2
		exit 1
	fi
done
install_packages
if ! command -v wrk >/dev/null; then
	echo "bench/compare.sh: wrk is missing (Debian: apt-get install wrk); run as root to have it installed" >&2
	exit 1
fi
for tool in nginx haproxy; do
	if wanted "$tool" && ! command -v "$tool" >/dev/null; then
		skip "$tool" "not installed (Debian: apt-get install $tool); run as root to have it installed"
	fi
done
if wanted portkey; then install_portkey; fi
pinned=()
all_cpus=$(taskset -cp $$ 2>/dev/null | sed 's/.*: //') || true
if [ "$C1_CPU" != none ] && ! taskset -c "$C1_CPU" true 2>/dev/null; then
	echo "bench/compare.sh: cannot run on CPU '$C1_CPU' (taskset); latency at concurrency 1 is timed unpinned" >&2
	C1_CPU=none
fi
# The CPUs left to the load generator and the mock: all but GATEWAY_CPU.
load_cpus=none
if [ "$GATEWAY_CPU" != none ]; then
	load_cpus=$(python3 -c 'import os, sys
cpus = sorted(os.sched_getaffinity(0))
gw = int(sys.argv[1]) if sys.argv[1].isdigit() else -1
print(",".join(map(str, (c for c in cpus if c != gw))) if gw in cpus and len(cpus) > 1 else "")' "$GATEWAY_CPU")
	if [ -z "$load_cpus" ]; then
		echo "bench/compare.sh: GATEWAY_CPU=$GATEWAY_CPU is not one of this process's CPUs ($all_cpus), or no other is left for the load; the loaded runs are unpinned" >&2
		GATEWAY_CPU=none load_cpus=none
	fi
fi

say "starting the mock and the gateways"
port[direct]=$(free_port)
start direct "$MOCK" --port "${port[direct]}" --slots 4096
wait_ready direct "http://127.0.0.1:${port[direct]}/health" -f ||
	{ echo "bench/compare.sh: the mock did not start" >&2; exit 1; }
peers=(direct)
for peer in $PEERS; do
	[ "$peer" != direct ] || continue
	skipped "$peer" || start_peer "$peer"
	skipped "$peer" || peers+=("$peer")
done

# A short run of each kind first, so that connections are open and node's
# compiler has seen the path before anything is measured.
say "warming up: ${peers[*]}"
for peer in "${peers[@]}"; do
	DURATION=1 wrk_chat "$peer" "$LOAD_CONCURRENCY" 16 off "$work/warm-$peer.json"
	DURATION=1 bench_stream "$peer" "$LOAD_CONCURRENCY" "$work/warm-$peer-s.json"
done

for round in $(seq "$ROUNDS"); do
	for peer in "${peers[@]}"; do
		say "round $round of $ROUNDS: $peer"
		measure "$peer" "$round"
	done
done

# Proof that each gateway logged every request, as a deployment would.
mkdir -p "$work/access"
for peer in "${peers[@]}"; do
	case $peer in
	sluice | sluice-streams) grep -c ' access ' "$work/$peer.log" ;;
	nginx) wc -l <"$work/nginx-access.log" ;;
	haproxy) wc -l <"$work/haproxy.log" ;;
	*) continue ;;
	esac >"$work/access/$peer" || true
done

python3 "$HERE/report.py" "$work" "$OUT" "$ROUNDS" "$DURATION" "$(nproc)" \
	"$STREAM_TOKENS" "$C1_CPU" "$GATEWAY_CPU:$load_cpus" "${peers[@]}" | tee "$OUT/compare.md"
echo "results in $OUT: compare.md, compare.json, compare.svg" >&2
