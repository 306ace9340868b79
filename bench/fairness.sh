#!/usr/bin/env bash
# Fair queuing across tenants (bench/RESULTS.md, "Fairness between
# tenants"): sluice with two keys in front of the 4-slot llama-server it
# starts on the tiny demo model (--max-queue 64, so that a flood's
# backlog drains in seconds), one sluice-bench per tenant, each with its
# own rate, neither retrying a refusal. Capacity C is measured first
# (closed loop, 16 at once, 10 s); then
#   alone:  B alone at C/4 (half of its fair share, C/2);
#   key:    A floods at 5C (ten times its share) while B sends at C/4,
#           under --fairness key;
#   off:    the same under --fairness off (arrival order inside a
#           priority, as before);
#   both:   A and B both flood at 5C (--fairness key): Jain's index over
#           the service each got (sluice_key_service_tokens_total);
#   reserve, alone-r: key and alone again with $FAIR_RESERVE_SLOTS
#           slots (default 8), $FAIR_RESERVE of them (default 4) the fair
#           reserve, so the flood fills the other 4.
# Run from anywhere after `ninja -C build`; reports go to
# $SLUICE_BENCH_OUT (default bench/results/fairness); each run lasts
# $FAIR_S seconds (default 20) after a 2 s warm-up.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${SLUICE_BENCH_OUT:-bench/results/fairness}
SECONDS_EACH=${FAIR_S:-20}
BENCH=build/bench/sluice-bench
mkdir -p "$OUT"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

digest() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
cat >"$OUT/keys.yaml" <<EOF
keys:
  tenant-a:
    hash: sha256:$(digest a-secret)
  tenant-b:
    hash: sha256:$(digest b-secret)
EOF

# start_sluice NAME ARGS...: a fresh sluice (and llama-server) on a free
# port; sets $url and $sluice_pid.
start_sluice() {
	local name=$1 port
	shift
	[ -n "${sluice_pid:-}" ] && { kill "$sluice_pid"; wait "$sluice_pid" || true; }
	port=$(free_port)
	build/sluice --listen "127.0.0.1:$port" --config "$OUT/keys.yaml" \
		--model build/tests/demo-tiny.gguf --slots 4 --max-queue 64 \
		--admin-key admin-secret "$@" >"$OUT/$name.log" 2>&1 &
	sluice_pid=$!
	pids+=($sluice_pid)
	url=http://127.0.0.1:$port
	until build/sluice --probe "$url/ready" 2>/dev/null; do sleep 0.2; done
}

# bench NAME KEY ARGS...: one sluice-bench run of one tenant.
bench() {
	local name=$1 key=$2
	shift 2
	echo "sluice-bench --api-key $key $*" >"$OUT/$name.cmd"
	"$BENCH" --url "$url" --api-key "$key" --metrics-key admin-secret \
		--quiet --json "$OUT/$name.json" \
		--max-tokens 32 --input-len 64 --warmup 2 "$@" >"$OUT/$name.md" || true
}

service() {
	curl -s -H 'Authorization: Bearer admin-secret' "$url/metrics" |
		awk -v k="$1" '$1 == "sluice_key_service_tokens_total{key=\"" k "\"}" { print $2 }'
}

start_sluice capacity
bench capacity a-secret --concurrency 16 --duration 10 --requests 1000000
C=$(python3 -c "import json; print(json.load(open('$OUT/capacity.json'))['runs'][0]['request_throughput'])")
A_RATE=$(python3 -c "print(round(5 * $C, 2))")
B_RATE=$(python3 -c "print(round($C / 4, 2))")
echo "capacity $C/s; A at $A_RATE/s, B at $B_RATE/s" | tee "$OUT/rates.txt"

run_pair() {
	local name=$1 a_rate=$2 b_rate=$3
	local a0 b0
	a0=$(service tenant-a)
	b0=$(service tenant-b)
	bench "$name-a" a-secret --retry off --rate "$a_rate" \
		--duration "$SECONDS_EACH" \
		--requests 1000000 &
	local a=$!
	bench "$name-b" b-secret --retry off --rate "$b_rate" \
		--duration "$SECONDS_EACH" --requests 1000000
	wait $a
	python3 -c "print($(service tenant-a) - ${a0:-0})" >"$OUT/$name-a.service"
	python3 -c "print($(service tenant-b) - ${b0:-0})" >"$OUT/$name-b.service"
}

start_sluice alone
bench alone-b b-secret --rate "$B_RATE" --duration "$SECONDS_EACH" --requests 1000000
start_sluice key --fairness key
run_pair key "$A_RATE" "$B_RATE"
start_sluice off --fairness off
run_pair off "$A_RATE" "$B_RATE"
start_sluice both --fairness key
run_pair both "$A_RATE" "$A_RATE"
R_SLOTS=${FAIR_RESERVE_SLOTS:-8}
R=${FAIR_RESERVE:-4}
start_sluice alone-r --slots "$R_SLOTS" --fair-reserve "$R"
bench alone-r-b b-secret --rate "$B_RATE" --duration "$SECONDS_EACH" --requests 1000000
start_sluice reserve --slots "$R_SLOTS" --fair-reserve "$R"
run_pair reserve "$A_RATE" "$B_RATE"

python3 - "$OUT" "$R_SLOTS" "$R" <<'EOF'
import json, sys
out, r_slots, r = sys.argv[1:4]
def run(name):
    return json.load(open("%s/%s.json" % (out, name)))["runs"][0]
def service(name):
    return float(open("%s/%s.service" % (out, name)).read())
print("| run | B TTFT p50 ms | B TTFT p99 ms | B p99 / alone | B queued p99 ms | B 2xx | B 429 | A req/s | B req/s |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
def row(label, b, alone, a=None):
    print("| %s | %.0f | %.0f | %.2f | %.0f | %d | %d | %s | %.2f |" % (
        label, b["median_ttft_ms"], b["p99_ttft_ms"],
        b["p99_ttft_ms"] / alone["p99_ttft_ms"],
        b["server_timing"]["queue"]["p99"],
        b["outcomes"]["all"]["2xx"], b["outcomes"]["all"]["429"],
        "%.2f" % a["request_throughput"] if a else "",
        b["request_throughput"]))
for name, label in (("alone-b", "B alone, 4 slots"),
                    ("alone-r-b", "B alone, %s slots, %s the fair reserve"
                     % (r_slots, r))):
    row(label, run(name), run(name))
for name, label, base in (("key", "fairness key", "alone-b"),
                          ("off", "fairness off", "alone-b"),
                          ("reserve", "fairness key, fair reserve %s of %s"
                           % (r, r_slots), "alone-r-b")):
    row("A floods, " + label, run(name + "-b"), run(base), run(name + "-a"))
sa, sb = service("both-a"), service("both-b")
jain = (sa + sb) ** 2 / (2 * (sa * sa + sb * sb))
print()
print("Both flood (fairness key): service A %.0f, B %.0f tokens; Jain %.3f"
      % (sa, sb, jain))
EOF
