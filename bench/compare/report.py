#!/usr/bin/env python3
"""Turns the raw runs of bench/compare.sh into its report.

usage: report.py WORK OUT ROUNDS DURATION CORES STREAM-TOKENS C1-CPU PEER...

WORK holds, per round R and peer P, rR-P-c1-I.json and rR-P-base-c1-I.json
(wrk, from chat.lua: second I through the peer, and of the mock alone just
before), rR-P-c32.json and rR-P-w32.json (wrk), rR-P-c32-cpu.json and rR-P-w32-cpu.json (CPU ticks over those
runs), rR-P-s32.json and rR-P-s1.json (sluice-bench); versions/P and
skipped/P hold a line each. Writes OUT/compare.json (every figure, per round, and the
medians) and OUT/compare.svg (a plot of the medians), and prints the
Markdown report, which the script also saves as OUT/compare.md. Nothing but
the standard library is used, so that the plot needs no package.
"""
import itertools
import json
import math
import os
import statistics
import sys

LABELS = {
    "direct": "direct (the mock, no gateway)",
    "sluice": "sluice default",
    "sluice-streams": "sluice `--stream-upstream on`",
    "nginx": "nginx",
    "haproxy": "haproxy",
    "portkey": "Portkey",
}
ORDER = list(LABELS)
HZ = os.sysconf("SC_CLK_TCK")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_line(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def checked(run, peer, r, what, problems):
    """A wrk run's figures, or None, with its errors noted."""
    if run is None:
        problems.append("%s, round %d: %s: no result" % (peer, r, what))
    elif run["errors"] or run["status_errors"]:
        problems.append("%s, round %d: %s: %d socket errors, %d answers not 2xx"
                        % (peer, r, what, run["errors"], run["status_errors"]))
    return run if run and run["requests"] else None


def one_round(work, r, peer, tokens, problems):
    """The figures of one peer in one round; absent where a run failed."""
    stem = "%s/r%d-%s" % (work, r, peer)
    fig = {}
    runs = {}
    for name, what in (("c32", "plain at c=32"), ("w32", "streams at c=32 (wrk)")):
        runs[name] = checked(load("%s-%s.json" % (stem, name)), peer, r, what, problems)
    c32, w32 = runs["c32"], runs["w32"]
    # Concurrency 1: slices of a second through the peer, each after one
    # to the mock alone (not for the mock itself).
    slices = []
    for i in itertools.count(1):
        # wrk's output is kept even where it wrote no figures.
        if not os.path.exists("%s-c1-%d.txt" % (stem, i)):
            break
        what = "plain at c=1, second %d" % i
        c1 = checked(load("%s-c1-%d.json" % (stem, i)), peer, r, what, problems)
        base = load("%s-base-c1-%d.json" % (stem, i))
        if peer != "direct":
            base = checked(base, peer, r, "the mock alone before " + what, problems)
        if c1:
            slices.append((c1, base))
    if not slices:
        problems.append("%s, round %d: plain at c=1: no result" % (peer, r))
    for q in ("p50", "p99"):
        key = q + "_us"
        fig[key] = median(c1[key] for c1, _ in slices)
        fig["added_" + key] = median(c1[key] - base[key] for c1, base in slices if base)
    cpu = load(stem + "-c32-cpu.json")
    if c32:
        fig["req_per_s"] = c32["requests"] / c32["duration_s"]
        if cpu:
            fig["cpu_us_per_request"] = cpu["gateway_ticks"] / HZ * 1e6 / c32["requests"]
            fig["mock_cpu_us_per_request"] = cpu["mock_ticks"] / HZ * 1e6 / c32["requests"]
    cpu = load(stem + "-w32-cpu.json")
    if w32:
        fig["streams_per_s"] = w32["requests"] / w32["duration_s"]
        if cpu:
            fig["cpu_us_per_token"] = (cpu["gateway_ticks"] / HZ * 1e6
                                       / (w32["requests"] * tokens))
    for name, conc in (("s32", 32), ("s1", 1)):
        doc = load("%s-%s.json" % (stem, name))
        if doc is None:
            problems.append("%s, round %d: streams at c=%d (sluice-bench): no result"
                            % (peer, r, conc))
            continue
        run = doc["runs"][0]
        if run["fail"]:
            problems.append("%s, round %d: streams at c=%d (sluice-bench): %d of %d failed"
                            % (peer, r, conc, run["fail"], run["requests"]))
        if run["success"]:
            fig["ttft_p50_ms_%s" % name] = run["ttft_p50_ms"]
            fig["bench_streams_per_s_%s" % name] = run["req_per_s"]
    return fig


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(values, fmt, unit=""):
    """Lowest-highest of the rounds, as the issue's tables write them:
    "6,000-6,400", "+22-35 µs", "-4 to +6 µs"."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return "n/a"
    lo, hi = fmt(values[0]), fmt(values[-1])
    if lo == hi:
        text = lo
    elif values[0] >= 0:
        text = "%s-%s" % (lo, hi.lstrip("+"))
    else:
        text = "%s to %s" % (lo, hi)
    return text + unit


def us(v):
    return "{:,.0f}".format(v)


def added_us(v):
    return "{:+,.0f}".format(v)


def rate(v):
    return "{:,.0f}".format(v)


def ms(v):
    return "{:,.1f}".format(v) if v >= 1 else "{:,.2f}".format(v)


def cpu_token(v):
    return "{:,.1f}".format(v)


def svg_plot(path, peers, med, footer):
    """Four panels of horizontal bars: the medians of the headline figures."""
    panels = [
        ("added p50 at c=1, µs (log scale)", "added_p50_us", True),
        ("requests/s at c=32 (plain)", "req_per_s", False),
        ("gateway CPU per request at c=32, µs (log scale)", "cpu_us_per_request", True),
        ("streams/s at c=32 (64 tokens)", "streams_per_s", False),
    ]
    gateways = [p for p in peers if p != "direct"]
    bar_h, gap, label_w, bar_w, pad = 18, 6, 190, 230, 20
    panel_h = 30 + len(gateways) * (bar_h + gap)
    panel_w = label_w + bar_w + 90
    width, height = 2 * panel_w + pad, 2 * panel_h + 56
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="18" font-size="14" font-weight="bold">'
           'sluice, nginx, haproxy and Portkey in front of one zero-delay mock '
           '(medians of the rounds)</text>']
    for i, (title, key, log) in enumerate(panels):
        x0 = (i % 2) * (panel_w + pad) + 10
        y0 = (i // 2) * panel_h + 40
        out.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (x0, y0 + 12, title))
        values = [med[p].get(key) for p in gateways]
        # Throughput panels show the mock alone as a dashed line: the most
        # that this load generator and mock reach without a gateway.
        direct = None if log else med.get("direct", {}).get(key)
        top = max([v for v in values + [direct] if v], default=1)
        floor = min([v for v in values if v and v > 0], default=1) / 2 if log else 0

        def length(v):
            if v is None or v <= 0:
                return 0
            if log:
                lo, hi = math.log10(floor), math.log10(top)
                return bar_w * (math.log10(v) - lo) / ((hi - lo) or 1)
            return bar_w * v / top

        for j, (peer, v) in enumerate(zip(gateways, values)):
            y = y0 + 22 + j * (bar_h + gap)
            colour = "#1f77b4" if peer.startswith("sluice") else "#999999"
            label = LABELS[peer].replace("`", "")
            out.append('<text x="%d" y="%d">%s</text>' % (x0, y + 13, label))
            out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>'
                       % (x0 + label_w, y, length(v), bar_h, colour))
            text = "n/a" if v is None else "{:,.0f}".format(v)
            out.append('<text x="%.1f" y="%d">%s</text>'
                       % (x0 + label_w + length(v) + 4, y + 13, text))
        if direct:
            x = x0 + label_w + length(direct)
            y1 = y0 + 22 + len(gateways) * (bar_h + gap) - gap
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" '
                       'stroke-dasharray="4,3"/>' % (x, y0 + 18, x, y1))
            out.append('<text x="%.1f" y="%d" font-size="10">direct {:,.0f}</text>'.format(direct)
                       % (x + 3, y0 + 18))
    out.append('<text x="10" y="%d" font-size="10" fill="#555">%s</text>' % (height - 6, footer))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    work, out, rounds, duration, cores, tokens, c1_cpu, split = sys.argv[1:9]
    rounds, tokens = int(rounds), int(tokens)
    gateway_cpu, load_cpus = split.split(":", 1)
    peers = [p for p in ORDER if p in sys.argv[9:]]
    problems = []
    per_round = {p: [one_round(work, r, p, tokens, problems) for r in range(1, rounds + 1)]
                 for p in peers}
    keys = sorted({k for p in peers for fig in per_round[p] for k in fig
                   if fig[k] is not None})
    med = {p: {k: median(fig.get(k) for fig in per_round[p]) for k in keys} for p in peers}
    skipped = {p: read_line("%s/skipped/%s" % (work, p))
               for p in ORDER if os.path.exists("%s/skipped/%s" % (work, p))}
    versions = {p: read_line("%s/versions/%s" % (work, p))
                for p in ORDER if os.path.exists("%s/versions/%s" % (work, p))}

    lines = ["| path | added p50 / p99 at c=1 | req/s at c=32 | CPU per request at c=32 "
             "| streams/s at c=32 | TTFT p50 at c=32 | TTFT p50 at c=1 | CPU per streamed token |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in ORDER:
        if p in skipped:
            lines.append("| %s | skipped: %s | | | | | | |"
                         % (LABELS[p], skipped[p].replace("|", "/")))
        if p not in peers:
            continue
        rs = per_round[p]

        def col(key, fmt, unit=""):
            return spread([fig.get(key) for fig in rs], fmt, unit)

        if p == "direct":
            latency = "%s / %s (itself)" % (col("p50_us", us, " µs"), col("p99_us", us, " µs"))
            cpu = "(the mock: %s)" % col("mock_cpu_us_per_request", us, " µs")
            cpu_tok = "(the mock: %s)" % col("cpu_us_per_token", cpu_token, " µs")
        else:
            latency = "%s / %s" % (col("added_p50_us", added_us, " µs"),
                                   col("added_p99_us", added_us, " µs"))
            cpu = col("cpu_us_per_request", us, " µs")
            cpu_tok = col("cpu_us_per_token", cpu_token, " µs")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            LABELS[p], latency, col("req_per_s", rate), cpu, col("streams_per_s", rate),
            col("ttft_p50_ms_s32", ms, " ms"), col("ttft_p50_ms_s1", ms, " ms"), cpu_tok))

    # Against nginx: the targets, from the medians.
    vs = []
    if "nginx" in peers and len(set(peers) - {"direct", "nginx"}):
        n = med["nginx"]
        def fmt_added(m):
            if m.get("added_p50_us") is None or m.get("added_p99_us") is None:
                return "n/a"
            return "%s / %s µs" % (added_us(m["added_p50_us"]), added_us(m["added_p99_us"]))

        vs += ["", "Against nginx (medians of the rounds; a ratio is the path's figure "
               "over nginx's):", "",
               "| path | req/s at c=32 | added p50 / p99 at c=1 (nginx: %s) | CPU per request "
               "| streams/s at c=32 | TTFT p50 at c=32, less nginx's "
               "| TTFT p50 at c=1, less nginx's |" % fmt_added(n),
               "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]

        def ratio(p, k):
            a, b = med[p].get(k), n.get(k)
            return "%.2fx" % (a / b) if a is not None and b else "n/a"

        def diff(p, k, f):
            a, b = med[p].get(k), n.get(k)
            return f(a - b) if a is not None and b is not None else "n/a"

        for p in peers:
            if p in ("direct", "nginx"):
                continue
            vs.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                LABELS[p], ratio(p, "req_per_s"), fmt_added(med[p]),
                ratio(p, "cpu_us_per_request"), ratio(p, "streams_per_s"),
                diff(p, "ttft_p50_ms_s32", "{:+.2f} ms".format),
                diff(p, "ttft_p50_ms_s1", "{:+.2f} ms".format)))

    if gateway_cpu == "none":
        placed = ("Load generator (wrk, sluice-bench), gateway and mock share this "
                  "machine's %s cores; nothing is pinned but at c=1 (below), so the "
                  "figures include their competition for CPU." % cores)
    else:
        placed = ("At c=32 the gateway runs alone on CPU %s, the load generator (wrk, "
                  "sluice-bench) and the mock on CPU %s (direct: the mock on CPU %s); "
                  "streams at c=1 are unpinned." % (gateway_cpu, load_cpus, gateway_cpu))
    notes = ["", "%d round(s), each measuring every path in turn; %s s per run; ranges "
             "are the lowest and highest of the rounds. %s" % (rounds, duration, placed)]
    pinned = ("with wrk, the gateway and the mock all on CPU %s (unpinned, which vCPU "
              "each wakeup lands on moves the mock's own p50 between about 11 and 75 µs "
              "from run to run)" % c1_cpu if c1_cpu != "none" else "unpinned")
    notes.append("Added latency: the path's p50 (p99) at c=1 less the mock's own, in "
                 "one-second slices, each right after one to the mock alone, the median "
                 "of the pairs; %s. Streams/s and CPU per token: wrk, which reads "
                 "each stream of %d tokens whole. Time to first token: sluice-bench, "
                 "which times each event; its work per event holds it to a tenth of "
                 "wrk's rate, so at c=32 the first token also waits on the client."
                 % (pinned, tokens))
    notes.append("CPU is the gateway process's utime+stime (nginx: master and worker) "
                 "over the run, divided by the requests answered (or the tokens "
                 "relayed).")
    if "portkey" in peers or "portkey" in skipped:
        notes.append("Portkey holds each stream's first chunk about 25 ms by design, "
                     "which its time to first token shows; it writes no access log.")
    logged = {p: read_line("%s/access/%s" % (work, p)) for p in peers
              if os.path.exists("%s/access/%s" % (work, p))}
    if logged:
        notes.append("Access log lines written over the run: " + "; ".join(
            "%s {:,}".format(int(n)) % LABELS[p].replace("`", "") for p, n in logged.items()
            if n and n.isdigit()) + ".")
    if versions:
        notes.append("Versions: " + "; ".join("%s: %s" % (p, v) for p, v in versions.items()) + ".")
    if problems:
        notes += ["", "Errors seen:"] + ["- " + line for line in problems]

    report = "\n".join(lines + vs + notes) + "\n"
    sys.stdout.write(report)
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump({"rounds": rounds, "duration_s": float(duration), "cores": int(cores),
                   "c1_cpu": c1_cpu, "gateway_cpu": gateway_cpu,
                   "load_cpus": load_cpus,
                   "peers": {p: {"label": LABELS[p], "rounds": per_round[p], "median": med[p]}
                             for p in peers},
                   "skipped": skipped, "versions": versions, "errors": problems},
                  f, indent=2)
        f.write("\n")
    svg_plot(os.path.join(out, "compare.svg"), peers, med,
             "bench/compare.sh: %d round(s) of %s s runs; wrk -t1; load generator, "
             "gateways and mock share %s cores" % (rounds, duration, cores))


if __name__ == "__main__":
    main()
