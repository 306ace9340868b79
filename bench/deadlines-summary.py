#!/usr/bin/env python3
"""The tables of bench/deadlines.sh's runs, in Markdown, from their JSON.

    bench/deadlines-summary.py DIR
"""

import json
import os
import sys


def run(out, name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    return json.load(open(path))["runs"][0]


def threads(out, name):
    """(most threads, CPU share) llama-server had in a run: its CPU is
    in clock ticks (100 a second), one sample a second."""
    path = os.path.join(out, name + ".threads")
    try:
        rows = [l.split() for l in open(path) if len(l.split()) == 2]
    except OSError:
        return None
    if len(rows) < 2:
        return None
    most = max(int(t) for t, _ in rows)
    cpu = (int(rows[-1][1]) - int(rows[0][1])) / 100 / (len(rows) - 1)
    return most, cpu


def pct(x):
    return "-" if x is None else "%.0f%%" % (100 * x)


def num(x, fmt="%.1f"):
    return "-" if x is None else fmt % x


def main(out):
    for w in ("sharegpt", "mixed"):
        cap = run(out, w + "-capacity")
        unloaded = run(out, w + "-unloaded")
        if not cap:
            continue
        c = cap["request_throughput"]
        rates = open(os.path.join(out, w + "-rates.txt")).read().strip()
        print("\n%s: capacity %.1f req/s (16 at once through sluice), "
              "unloaded TTFT p99 %.0f ms; %s\n" %
              (w, c, unloaded["p99_ttft_ms"], rates.split(", ")[-1]))
        print("| offered | | served req/s | TTFT p50 ms | goodput req/s "
              "| goodput / C | admitted within SLO | refused | refusal p50 "
              "ms | with Retry-After | predicted TTFT error p50 / p90 "
              "| llama-server threads, CPU |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
              "| ---: | ---: | ---: |")
        for m in (1, 2, 4):
            for kind, label in (("alone", "llama-server alone"),
                                ("plain", "sluice, no SLO"),
                                ("slo", "sluice, SLO headers")):
                r = run(out, "%s-%dx-%s" % (w, m, kind))
                if not r:
                    continue
                ref = r.get("refusals") or {}
                t = threads(out, "%s-%dx-%s" % (w, m, kind))
                served = r["request_throughput"]
                good = r["request_goodput"]
                print("| %dx (%.0f/s) | %s | %.1f | %s | %.1f | %.2f | %s "
                      "| %d | %s | %s | %s | %s |" % (
                          m, m * c, label, served,
                          num(r.get("median_ttft_ms"), "%.0f"), good,
                          good / c, pct(r.get("admitted_attainment")),
                          ref.get("count", 0),
                          num(ref.get("median_ms"), "%.2f"),
                          pct(ref.get("retry_after_share")),
                          "%s / %s" % (pct(r.get("median_predictor_error")),
                                       pct(r.get("p90_predictor_error")))
                          if r.get("median_predictor_error") is not None
                          else "-",
                          "%d, %.0f%%" % (t[0], 100 * t[1]) if t else "-"))
    for headers in ("off", "on"):
        r = run(out, "classes-" + headers)
        if not r:
            continue
        if headers == "off":
            print("\nTwo classes at twice the ShareGPT capacity\n")
            print("| levels sent | class | requests | served | shed | "
                  "attainment | of admitted | goodput req/s |")
            print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, k in sorted(r["slo_classes"].items()):
            print("| %s | %s | %d | %d | %d | %s | %s | %.1f |" % (
                headers, name, k["num_prompts"], k["served"], k["shed"],
                pct(k["attainment"]), pct(k["admitted_attainment"]),
                k["request_goodput"]))
        print("| %s | all | %d | | | | | %.1f |" % (
            headers, r["num_prompts"], r["request_goodput"]))


if __name__ == "__main__":
    main(sys.argv[1])
