#!/usr/bin/env bash
# Reproduces the runs of bench/RESULTS.md:
#
#   bench/run.sh overhead   sluice against the mock llama-server (zero delays),
#                           then memory
#   bench/run.sh memory     sluice's memory per idle connection and per stream
#   bench/run.sh llama      the mini-v sweep against a real llama-server
#   bench/run.sh plain      plain answers against a real llama-server
#   bench/run.sh priority   10% urgent, 90% normal at twice capacity
#   bench/run.sh all        all four (the default)
#
# Needs a build (./deploy/setup.sh). Results go to $SLUICE_BENCH_OUT
# (default bench/results): a Markdown table per run, JSON, and the sweeps'
# HTML reports. Each run starts its own processes on free ports
# and stops them at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${SLUICE_BENCH_OUT:-bench/results}
BENCH=build/bench/sluice-bench
MOCK=build/bench/mock-llama-server
SLUICE=build/sluice
MODEL=build/tests/demo-tiny.gguf
LLAMA=${SLUICE_LLAMA_SERVER:-$(command -v llama-server ||
	echo "${XDG_CACHE_HOME:-$HOME/.cache}/sluice/llama.cpp/bin/llama-server")}
mkdir -p "$OUT"
logs=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$logs"' EXIT

say() { printf '\n== %s\n' "$*" >&2; }

# wait_for FILE REGEX PID: prints the first capture group of the matching
# line; gives up when PID exits first.
wait_for() {
	for _ in $(seq 600); do
		if m=$(sed -nE "s#.*$2.*#\\1#p" "$1" | head -n 1) && [ -n "$m" ]; then
			echo "$m"
			return 0
		fi
		kill -0 "$3" 2>/dev/null || break
		sleep 0.1
	done
	echo "bench/run.sh: gave up waiting for '$2' in $1:" >&2
	tail -n 5 "$1" >&2
	exit 1
}

# start NAME COMMAND...: runs it in the background, logging to $logs/NAME.
start() {
	local name=$1
	shift
	"$@" >"$logs/$name" 2>&1 &
	pids+=($!)
	eval "${name}_pid=$!"
}

stop() {
	local pid_var="${1}_pid"
	kill "${!pid_var}" 2>/dev/null || true
	wait "${!pid_var}" 2>/dev/null || true
}

start_mock() { # start_mock NAME ARGS...
	local name=$1
	shift
	start "$name" "$MOCK" --port 0 "$@"
	local pid_var="${name}_pid"
	eval "${name}_port=$(wait_for "$logs/$name" 'listening on http://127.0.0.1:([0-9]+)' "${!pid_var}")"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Without access lines: a benchmark should not pay a write(2) per request.
start_sluice() { # start_sluice NAME ARGS...
	local name=$1 port
	shift
	port=$(free_port)
	start "$name" "$SLUICE" --listen "127.0.0.1:$port" --log-level warn "$@"
	eval "${name}_port=$port"
	local pid_var="${name}_pid"
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$port/ready" >/dev/null && return 0
		kill -0 "${!pid_var}" 2>/dev/null || break
		sleep 0.1
	done
	echo "bench/run.sh: $name never became ready:" >&2
	tail -n 5 "$logs/$name" >&2
	exit 1
}

start_llama() { # start_llama NAME SLOTS
	local port
	port=$(free_port)
	start "$1" "$LLAMA" --host 127.0.0.1 --port "$port" -m "$MODEL" \
		-np "$2" -c $(($2 * 4096)) --no-kv-unified --no-webui --metrics
	eval "${1}_port=$port"
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
		sleep 0.1
	done
	echo "bench/run.sh: llama-server never became healthy" >&2
	exit 1
}

bench() { # bench FILE-STEM ARGS...: one sluice-bench invocation
	local stem=$1
	shift
	"$BENCH" --quiet on --json "$OUT/$stem.json" "$@" | tee "$OUT/$stem.md"
}

# Peak and current resident memory of a process, in KiB.
rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
cpu_seconds() { # user+system CPU seconds of a process
	awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# Waits until sluice reports N requests in flight (polls /health).
wait_inflight() { # PORT N
	for _ in $(seq 1200); do
		n=$(curl -s "http://127.0.0.1:$1/health" |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["inflight"])' 2>/dev/null || echo 0)
		[ "$n" -ge "$2" ] && return 0
		sleep 0.1
	done
	echo "bench/run.sh: never saw $2 requests in flight" >&2
	return 1
}

overhead() {
	say "overhead: the same load straight to the mock and through sluice"
	start_mock mock --slots 4096
	# Plain answers two ways: assembled from an upstream stream
	# (--stream-upstream on) and relayed as they come (off; the default,
	# auto, relays them where no stream runs).
	start_sluice front --upstream "http://127.0.0.1:$mock_port" \
		--batch-window 0 --slots-per-upstream 4096 --max-connections 19000 \
		--stream-upstream on
	start_sluice relay --upstream "http://127.0.0.1:$mock_port" \
		--batch-window 0 --slots-per-upstream 4096 --max-connections 19000 \
		--stream-upstream off
	for c in 1 16 256; do
		n=$((c == 1 ? 5000 : 20000))
		bench "overhead-direct-c$c" --url "http://127.0.0.1:$mock_port" \
			--endpoint chat --stream off --concurrency "$c" \
			--requests "$n" --label "direct c=$c"
		bench "overhead-sluice-c$c" --url "http://127.0.0.1:$front_port" \
			--endpoint chat --stream off --concurrency "$c" \
			--requests "$n" --label "sluice c=$c"
		bench "overhead-relay-c$c" --url "http://127.0.0.1:$relay_port" \
			--endpoint chat --stream off --concurrency "$c" \
			--requests "$n" --label "sluice relay c=$c"
	done

	say "throughput: sluice's CPU time per request at concurrency 64"
	for name in front relay; do
		pid_var="${name}_pid" port_var="${name}_port"
		cpu0=$(cpu_seconds "${!pid_var}")
		bench "throughput-$name" --url "http://127.0.0.1:${!port_var}" \
			--endpoint chat --stream off --concurrency 64 \
			--requests 50000 --label "sluice $name"
		cpu1=$(cpu_seconds "${!pid_var}")
		python3 -c '
import json, sys
cpu = float(sys.argv[2]) - float(sys.argv[1])
run = json.load(open(sys.argv[3]))["runs"][0]
print("%s: sluice CPU %.2f s for %d requests: %.1f us per request, "
      "%.0f requests per CPU-second (one core)"
      % (sys.argv[4], cpu, run["success"], cpu * 1e6 / run["success"],
         run["success"] / cpu))' "$cpu0" "$cpu1" "$OUT/throughput-$name.json" "$name" |
			tee "$OUT/throughput-$name-cpu.md"
	done
	stop relay
	stop front
	stop mock

	say "streams: added time to first token and inter-token gaps"
	start_mock slowmock --slots 4096 --prompt-delay-ms 20 --token-delay-ms 10 \
		--tokens 32
	start_sluice sfront --upstream "http://127.0.0.1:$slowmock_port" \
		--batch-window 0 --slots-per-upstream 4096
	for c in 1 64; do
		bench "stream-direct-c$c" --url "http://127.0.0.1:$slowmock_port" \
			--endpoint chat --stream on --concurrency "$c" \
			--requests $((c * 20)) --label "direct c=$c"
		bench "stream-sluice-c$c" --url "http://127.0.0.1:$sfront_port" \
			--endpoint chat --stream on --concurrency "$c" \
			--requests $((c * 20)) --label "sluice c=$c"
	done
	stop sfront
	stop slowmock

	memory
}

# Resident memory: idle connections, and streams in flight.
memory() {
	say "memory: 10,000 idle connections"
	start_mock idlemock --slots 16
	start_sluice idle --upstream "http://127.0.0.1:$idlemock_port" \
		--max-connections 19000 --keepalive-timeout 600 --header-timeout 600
	python3 -c '
import socket, sys
port, pid = int(sys.argv[1]), int(sys.argv[2])
def rss():
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
# A request first: buffers that every connection shares are warmed.
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); s.recv(65536); s.close()
before = rss()
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(10000)]
for c in conns:  # each sends a request, gets its answer, then idles
    c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
for c in conns:
    c.recv(65536)
after = rss()
print("10000 idle keep-alive connections: sluice RSS %d KiB -> %d KiB: "
      "%.2f KiB per connection" % (before, after, (after - before) / 10000))
for c in conns:
    c.close()' "$idle_port" "$idle_pid" | tee "$OUT/memory-idle.md"
	stop idle
	stop idlemock

	# sluice holds two descriptors per stream (client, upstream): with the
	# hard limit of 20000 here (ulimit -Hn), 9,900 streams fit.
	max_streams=${SLUICE_BENCH_MAX_STREAMS:-9900}
	for n in 1000 "$max_streams"; do
		say "memory: $n concurrent streams (10 s each)"
		start_mock "longmock$n" --slots 20000 --token-delay-ms 100 --tokens 100
		port_var="longmock${n}_port"
		start_sluice "streams$n" --upstream "http://127.0.0.1:${!port_var}" \
			--batch-window 0 --slots-per-upstream 20000 \
			--max-connections 19000 --max-queue 20000
		pid_var="streams${n}_pid" sport_var="streams${n}_port"
		rss0=$(rss_kib "${!pid_var}")
		bench "streams-$n" --url "http://127.0.0.1:${!sport_var}" \
			--endpoint chat --stream on --max-tokens 100 \
			--concurrency "$n" --requests "$n" --timeout 120 \
			--label "$n streams" &
		bench_pid=$!
		wait_inflight "${!sport_var}" "$n"
		rss1=$(rss_kib "${!pid_var}")
		wait "$bench_pid"
		echo "$n concurrent streams: sluice RSS $rss0 KiB -> $rss1 KiB with all in flight: $(((rss1 - rss0) / n)) KiB per stream" |
			tee "$OUT/memory-streams-$n.md"
		stop "streams$n"
		stop "longmock$n"
	done
}

llama() {
	say "real llama-server (demo model, 4 slots): the mini-v sweep"
	start_llama ls 4
	start_sluice auto --upstream "http://127.0.0.1:$ls_port"
	start_sluice win50 --upstream "http://127.0.0.1:$ls_port" --batch-window 50ms
	start_sluice win0 --upstream "http://127.0.0.1:$ls_port" --batch-window 0
	start_sluice each --upstream "http://127.0.0.1:$ls_port" \
		--stream-coalesce 0
	sweep=(--endpoint chat --stream on --max-tokens 64 --requests 200
		--concurrency-sweep 1,2,4,8,16)
	bench llama-direct --url "http://127.0.0.1:$ls_port" "${sweep[@]}" \
		--label "llama-server" --html "$OUT/llama-direct.html"
	bench llama-auto --url "http://127.0.0.1:$auto_port" "${sweep[@]}" \
		--label "sluice default (auto)" --html "$OUT/llama-auto.html"
	bench llama-window50 --url "http://127.0.0.1:$win50_port" "${sweep[@]}" \
		--label "sluice 50 ms" --html "$OUT/llama-window50.html"
	bench llama-window0 --url "http://127.0.0.1:$win0_port" "${sweep[@]}" \
		--label "sluice 0 ms" --html "$OUT/llama-window0.html"
	# One sweep each is at the mercy of a noisy machine: alternate five
	# rounds of llama-server alone, sluice with its default settings and
	# sluice relaying each token as it comes (--stream-coalesce 0), and
	# compare the medians of tokens/s and TTFT p50 level by level.
	for round in 1 2 3 4 5; do
		for target in "ls:$ls_port" "auto:$auto_port" "each:$each_port"; do
			"$BENCH" --quiet on --url "http://127.0.0.1:${target#*:}" \
				"${sweep[@]}" --requests 100 \
				--json "$OUT/llama-round$round-${target%%:*}.json" >/dev/null
		done
	done
	python3 - "$OUT" <<'PY' | tee "$OUT/llama-ratio.md"
import json, statistics, sys
out = sys.argv[1]
def runs(round, name):
    return json.load(open("%s/llama-round%d-%s.json" % (out, round, name)))["runs"]
def median(name, i, key):
    return statistics.median(runs(r, name)[i][key] for r in range(1, 6))
print("| concurrency | llama-server tok/s | sluice default tok/s | ratio "
      "| `--stream-coalesce 0` ratio "
      "| TTFT p50 llama-server | TTFT p50 sluice | difference |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for i, level in enumerate((1, 2, 4, 8, 16)):
    d = median("ls", i, "output_tokens_per_s")
    s = median("auto", i, "output_tokens_per_s")
    e = median("each", i, "output_tokens_per_s")
    td = median("ls", i, "ttft_p50_ms")
    ts = median("auto", i, "ttft_p50_ms")
    print("| %d | %.0f | %.0f | %.3f | %.3f | %.2f ms | %.2f ms | %+.2f ms |"
          % (level, d, s, s / d, e / d, td, ts, ts - td))
PY
	# Contended: 16 clients on 4 slots, a fifth of them urgent. The auto
	# window gathers batches (avg batch > 1) and urgent requests overtake.
	bench llama-auto-mixed --url "http://127.0.0.1:$auto_port" \
		--endpoint chat --stream on --max-tokens 64 --requests 400 \
		--concurrency 16 --priority-mix urgent=0.2,normal=0.8 \
		--label "sluice default, contended"
	stop each
	stop win0
	stop win50
	stop auto
	stop ls
}

plain() {
	say "plain answers against a real llama-server: relayed, assembled"
	start_llama lp 4
	start_sluice pdef --upstream "http://127.0.0.1:$lp_port"
	start_sluice pon --upstream "http://127.0.0.1:$lp_port" \
		--stream-upstream on
	levels=(--endpoint chat --max-tokens 64 --requests 100
		--concurrency-sweep 1,2,4,8,16)
	# Alternating rounds, as in llama(): llama-server alone answering
	# plain, sluice as it comes (relaying them), sluice asking for streams
	# and assembling (--stream-upstream on), and a client reading
	# llama-server's own stream (what asking for a stream costs it).
	for round in 1 2 3 4 5; do
		for target in "ls:$lp_port:off" "default:$pdef_port:off" \
			"on:$pon_port:off" "lsstream:$lp_port:on"; do
			IFS=: read -r name tport stream <<<"$target"
			"$BENCH" --quiet on --url "http://127.0.0.1:$tport" \
				"${levels[@]}" --stream "$stream" \
				--json "$OUT/plain-round$round-$name.json" >/dev/null
		done
	done
	python3 - "$OUT" <<'PY' | tee "$OUT/plain-ratio.md"
import json, statistics, sys
out = sys.argv[1]
def median(name, i):
    return statistics.median(
        json.load(open("%s/plain-round%d-%s.json" % (out, r, name)))
        ["runs"][i]["output_tokens_per_s"] for r in range(1, 6))
print("| concurrency | llama-server tok/s | sluice default | ratio "
      "| sluice `--stream-upstream on` | ratio | llama-server streamed "
      "| ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for i, level in enumerate((1, 2, 4, 8, 16)):
    d = median("ls", i)
    row = [median(n, i) for n in ("default", "on", "lsstream")]
    print("| %d | %.0f | " % (level, d) +
          " | ".join("%.0f | %.3f" % (v, v / d) for v in row) + " |")
PY
	stop pon
	stop pdef
	stop lp
}

priority() {
	say "priority under saturation: twice capacity, open loop"
	# One thread: llama-server's threads spin at every barrier, so on a
	# shared two-core machine a second thread turns a neighbour's load
	# into stalls of seconds; one thread slows in proportion instead.
	LLAMA_ARG_THREADS=1 start_llama pls 4
	# One sluice per urgent reserve: none, one slot, two slots, and the
	# default (auto: sized from the urgent traffic it sees).
	common_sluice=(--upstream "http://127.0.0.1:$pls_port" --max-queue 64
		--queue-timeout 30)
	start_sluice prio "${common_sluice[@]}" --urgent-reserve 0
	start_sluice reserve "${common_sluice[@]}" --urgent-reserve 1
	start_sluice reserve2 "${common_sluice[@]}" --urgent-reserve 2
	start_sluice auto "${common_sluice[@]}"
	# Room that only urgent requests use: a llama-server with two slots
	# more than the four that normal traffic gets, kept for urgent ones
	# (--urgent-reserve 2 of its 6), so that an urgent request joins the
	# running batch rather than taking a slot from normal traffic.
	LLAMA_ARG_THREADS=1 start_llama plx 6
	start_sluice extra --upstream "http://127.0.0.1:$plx_port" \
		--max-queue 64 --queue-timeout 30 --urgent-reserve 2
	common=(--endpoint chat --stream on --max-tokens 128)
	# Unloaded: one at a time.
	bench prio-unloaded --url "http://127.0.0.1:$prio_port" "${common[@]}" \
		--concurrency 1 --requests 40 --priority-mix urgent=1 \
		--label unloaded
	# Capacity: what four slots serve with the queue never empty.
	bench prio-capacity --url "http://127.0.0.1:$prio_port" "${common[@]}" \
		--concurrency 16 --requests 200 --label capacity
	rate=$(python3 -c "import json; r=json.load(open('$OUT/prio-capacity.json'))['runs'][0]; print(round(2 * r['req_per_s'], 1))")
	load=(--rate "$rate" --duration 20 --requests 100000)
	# Overload makes some requests fail (429): not an error of the run.
	# All normal first, through the sluice without a reserve, then through
	# the default one before it has seen an urgent request (what auto
	# costs without urgent traffic).
	bench prio-normal --url "http://127.0.0.1:$prio_port" "${common[@]}" \
		"${load[@]}" --label "all normal" || true
	bench prio-normal-auto --url "http://127.0.0.1:$auto_port" \
		"${common[@]}" "${load[@]}" --label "all normal, default" || true
	mix=(--priority-mix urgent=0.1,normal=0.9)
	bench prio-mixed --url "http://127.0.0.1:$prio_port" "${common[@]}" \
		"${load[@]}" "${mix[@]}" --label "mixed, reserve 0" || true
	bench prio-mixed-reserve --url "http://127.0.0.1:$reserve_port" \
		"${common[@]}" "${load[@]}" "${mix[@]}" \
		--label "mixed, reserve 1" || true
	bench prio-mixed-reserve2 --url "http://127.0.0.1:$reserve2_port" \
		"${common[@]}" "${load[@]}" "${mix[@]}" \
		--label "mixed, reserve 2" || true
	bench prio-mixed-auto --url "http://127.0.0.1:$auto_port" \
		"${common[@]}" "${load[@]}" "${mix[@]}" \
		--label "mixed, default (auto)" || true
	bench prio-mixed-extra --url "http://127.0.0.1:$extra_port" \
		"${common[@]}" "${load[@]}" "${mix[@]}" \
		--label "mixed, 6 slots, 2 kept for urgent" || true
	echo "twice capacity: $rate requests/s" | tee "$OUT/prio-rate.md"
	stop extra
	stop plx
	stop auto
	stop reserve2
	stop reserve
	stop prio
	stop pls
}

case "${1:-all}" in
overhead) overhead ;;
memory) memory ;;
llama) llama ;;
plain) plain ;;
priority) priority ;;
all) overhead; llama; plain; priority ;;
*) echo "usage: bench/run.sh [overhead|memory|llama|plain|priority|all]" >&2; exit 2 ;;
esac
echo "results in $OUT" >&2
