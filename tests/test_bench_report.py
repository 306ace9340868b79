"""sluice-bench's saved reports read back: `sluice-bench report` prints a
report's Markdown summary and writes its HTML page, which renders in
headless Chromium with nothing fetched; `sluice-bench compare` sets
reports side by side with differences that follow from the files.

The reports are tests/data/bench-a.json (a sweep of 1, 2 and 4 clients
through sluice, then an SLO search over request rates) and bench-b.json
(the same sweep, three repetitions of each level). Every expected figure
is computed here from those files, never written down.

SLUICE_BENCH_BIN names the sluice-bench to test (by default the one built
beside SLUICE_BIN).
"""

import copy
import html.parser
import json
import math
import os
import re
import shutil
import subprocess

import sluice_test as st

BENCH = os.environ.get("SLUICE_BENCH_BIN") or os.path.join(
    os.path.dirname(st.SLUICE), "bench", "sluice-bench")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
A = os.path.join(DATA, "bench-a.json")
B = os.path.join(DATA, "bench-b.json")

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 180

# The Markdown summary's columns after label and load: (field, decimals,
# a count).
RUN_COLUMNS = [("completed", 0, True), ("failed", 0, True),
               ("request_throughput", 2, False),
               ("output_throughput", 1, False),
               ("request_goodput", 2, False), ("median_ttft_ms", 1, False),
               ("p99_ttft_ms", 1, False), ("p99_tpot_ms", 1, False),
               ("p99_e2el_ms", 1, False)]

# compare's key metrics: (field, decimals, a count).
KEY_METRICS = [("request_throughput", 3, False),
               ("output_throughput", 1, False),
               ("request_goodput", 3, False), ("mean_ttft_ms", 1, False),
               ("p99_ttft_ms", 1, False), ("mean_tpot_ms", 2, False),
               ("p99_tpot_ms", 2, False), ("p99_e2el_ms", 1, False),
               ("goodput_fraction", 4, False), ("failed", 2, True)]

# compare's figures of SLO-aware admission: shown only where some file
# has them (issue 40).
SLO_METRICS = [("admitted_attainment", 4, False),
               ("median_refusal_ms", 2, False),
               ("median_predictor_error", 4, False),
               ("p90_predictor_error", 4, False)]

# The charts against load, for each kind of load a report holds.
LOAD_CHARTS = ("ttft", "e2el", "requests", "tokens")


def load(path):
    with open(path) as f:
        return json.load(f)


def fmt(v, decimals, count=False):
    if v is None:
        return "-"
    if count and v == math.floor(v):
        return "%.0f" % v
    return "%.*f" % (decimals, v)


def load_text(run):
    if run.get("max_concurrency") is not None:
        return "c=%g" % run["max_concurrency"]
    if run.get("request_rate") is not None:
        return "r=%g/s" % run["request_rate"]
    return "-"


def levels(doc):
    """{level: [runs]} in order of first appearance."""
    out = {}
    for run in doc["runs"]:
        out.setdefault(run["level"], []).append(run)
    return out


def stat(runs, field, summary=None):
    """(mean, sample std or None) of field over runs, summed in order as
    sluice-bench does; from the report's own summary when given."""
    if summary and field in summary:
        s = summary[field]
        return s["mean"], s["std"] if s["n"] >= 2 else None
    xs = [r[field] for r in runs if r.get(field) is not None]
    if not xs:
        return None, None
    total = 0.0
    for x in xs:
        total += x
    mean = total / len(xs)
    if len(xs) < 2:
        return mean, None
    squares = 0.0
    for x in xs:
        squares += (x - mean) * (x - mean)
    return mean, math.sqrt(squares / (len(xs) - 1))


def value_cell(s, decimals, count):
    mean, std = s
    text = fmt(mean, decimals, count)
    return text if std is None else "%s ± %.*f" % (text, decimals, std)


def diff_cell(a, x):
    (am, astd), (xm, xstd) = a, x
    if am is None or xm is None:
        return "-"
    if am != 0:
        pct = "%+.2f%%" % ((xm - am) / am * 100.0)
    else:
        pct = "+0.00%" if xm == 0 else "n/a"
    stds = [s for s in (astd, xstd) if s is not None]
    if not stds:
        return pct + ", spread unknown"
    within = abs(xm - am) <= 2 * max(stds)
    return pct + (", within noise" if within else ", beyond noise")


def expected_comparison(docs, names):
    """compare's table, line by line, from the documents."""
    head = "| load | metric |" + "".join(" %s |" % n for n in names)
    head += "".join(" %s vs %s |" % (n, names[0]) for n in names[1:])
    rule = "| --- | --- |" + " ---: |" * len(names) + " --- |" * (
        len(names) - 1)
    lines = [head, rule]
    by_load = [{load_text(runs[0]): runs for runs in levels(d).values()}
               for d in docs]
    summaries = [d["repeats"]["metrics"]
                 if "repeats" in d and len(levels(d)) == 1 else None
                 for d in docs]
    compared = [key for key in by_load[0]
                if any(key in b for b in by_load[1:])]
    metrics = KEY_METRICS + [
        m for m in SLO_METRICS
        if any(stat(b[key], m[0], s)[0] is not None
               for key in compared for b, s in zip(by_load, summaries)
               if key in b)]
    for key in compared:
        for field, decimals, count in metrics:
            stats = [stat(b[key], field, s) if key in b else None
                     for b, s in zip(by_load, summaries)]
            cells = [value_cell(s, decimals, count) if s else "-"
                     for s in stats]
            cells += [diff_cell(stats[0], s) if s else "-"
                      for s in stats[1:]]
            lines.append("| %s | %s |" % (key, field) +
                         "".join(" %s |" % c for c in cells))
    return lines


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.children, self.text = [], ""

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find(self, id_):
        return next((n for n in self.walk() if n.attrs.get("id") == id_),
                    None)

    def all_text(self):
        return self.text + "".join(c.all_text() for c in self.children)


class Tree(html.parser.HTMLParser):
    """A DOM as Chromium dumped it (or as written): elements, their
    attributes and their text."""

    VOID = {"meta", "link", "br", "img", "input", "hr", "area", "base",
            "col", "embed", "source", "track", "wbr"}

    def __init__(self, text):
        super().__init__()
        self.root = self.at = Node("#root", {}, None)
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.at)
        self.at.children.append(node)
        if tag not in self.VOID:
            self.at = node

    def handle_startendtag(self, tag, attrs):
        self.at.children.append(Node(tag, attrs, self.at))

    def handle_endtag(self, tag):
        n = self.at
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.at = n.parent

    def handle_data(self, data):
        self.at.text += data


class Report(st.TestCase):

    def bench(self, *args):
        return subprocess.run([BENCH, *args], capture_output=True,
                              text=True, timeout=SAFETY_NET_S)

    def write(self, name, doc):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def dump_dom(self, page):
        """The page's DOM after Chromium rendered it."""
        chromium = shutil.which("chromium")
        self.assertTrue(chromium, "chromium not found: deploy/setup.sh "
                        "--tests installs it")
        r = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--user-data-dir=" + os.path.join(
                 self.tmp, "chromium"), "--dump-dom", "file://" + page],
            capture_output=True, text=True, timeout=SAFETY_NET_S)
        self.assertIn("</svg>", r.stdout, r.stderr[-2000:])
        return r.stdout

    def check_offline(self, page):
        """The page fetches nothing: no script, no stylesheet or image by
        URL, no src or href at all, and a policy that forbids fetching;
        a URL may appear only as text, in the command that was run."""
        with open(page) as f:
            text = f.read()
        self.assertNotRegex(text, r"(?i)<script|<link|<img|<iframe|"
                            r"<object|<embed|\b(src|href|xlink:href|"
                            r"srcset|action)\s*=|url\(|@import")
        without_command = re.sub(r'<pre class="command">.*?</pre>', "",
                                 text, flags=re.S)
        self.assertNotRegex(without_command, r"(?i)https?:|//[a-z0-9]")
        self.assertIn("<meta http-equiv=\"Content-Security-Policy\" "
                      "content=\"default-src 'none'; style-src "
                      "'unsafe-inline'\">", text)

    def check_rendered(self, dom):
        """Nothing but numbers where numbers go: no NaN nor infinity."""
        self.assertNotRegex(dom, r"(?i)\b(nan|inf|infinity)\b")
        return Tree(dom).root

    def check_chart(self, root, id_, lines=None, bars=None):
        svg = root.find(id_)
        self.assertIsNotNone(svg, "no chart " + id_)
        self.assertEqual(svg.tag, "svg")
        data = [n for n in svg.walk()
                if n.attrs.get("class") == "data"
                and n.tag in ("polyline", "path", "rect")]
        self.assertTrue(data, "chart %s drew nothing" % id_)
        if lines is not None:
            points = [len(n.attrs["points"].split()) for n in data
                      if n.tag == "polyline"]
            self.assertEqual(points, lines, id_)
        if bars is not None:
            self.assertEqual(len([n for n in data if n.tag == "rect"]),
                             bars, id_)
        return svg

    def table_rows(self, root, id_):
        table = root.find(id_)
        self.assertIsNotNone(table, "no table " + id_)
        return [[c.all_text() for c in tr.children if c.tag == "td"]
                for tr in table.walk() if tr.tag == "tr" and
                any(c.tag == "td" for c in tr.children)]

    def test_report_prints_the_summary_and_writes_a_page_that_renders(self):
        doc = load(A)
        page = os.path.join(self.tmp, "a.html")
        r = self.bench("report", A, "--html", page)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        # The Markdown summary: one row a run, figures as the file has them.
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 2 + len(doc["runs"]))
        self.assertEqual(lines[0], "| label | load | completed | failed | "
                         "req/s | output tok/s | goodput req/s | TTFT p50 "
                         "ms | TTFT p99 ms | TPOT p99 ms | E2E p99 ms |")
        for line, run in zip(lines[2:], doc["runs"]):
            cells = [run["label"], load_text(run)] + [
                fmt(run[f], d, c) for f, d, c in RUN_COLUMNS]
            self.assertEqual(line, "| " + " | ".join(cells) + " |")

        self.check_offline(page)
        root = self.check_rendered(self.dump_dom(page))
        title = "sluice-bench: " + doc["label"]
        self.assertEqual([n.all_text() for n in root.walk()
                          if n.tag == "title" and n.parent.tag == "head"],
                         [title])
        self.assertEqual([n.all_text() for n in root.walk()
                          if n.tag == "h1"], [title])
        rows = self.table_rows(root, "runs")
        self.assertEqual(len(rows), len(doc["runs"]))
        self.assertEqual([row[:3] for row in rows],
                         [[doc["label"], load_text(run),
                           str(run["completed"])] for run in doc["runs"]])
        # A sweep of clients and a search over rates: a set of charts
        # for each, one line a curve, one point a level.
        closed = [run for run in doc["runs"] if run["max_concurrency"]]
        opened = [run for run in doc["runs"] if run["request_rate"]]
        for chart in LOAD_CHARTS:
            self.check_chart(root, chart + "-concurrency",
                             lines=[len(closed)] * 2)
            self.check_chart(root, chart + "-rate", lines=[len(opened)] * 2)
        # The search: its steps, the needed share and the best rate.
        search = self.check_chart(root, "search",
                                  lines=[len(doc["search"]["steps"])])
        rules = [n.all_text() for n in search.walk()
                 if n.tag == "text" and n.attrs.get("class") == "rule"]
        self.assertEqual(rules, [
            "needed: %g" % doc["search"]["min_goodput_fraction"],
            "best: %g req/s" % doc["search"]["best_rate"]])
        self.assertEqual(len(self.table_rows(root, "search-steps")),
                         len(doc["search"]["steps"]))
        # Tenants: a bar for each tenant in each run, and Jain's index.
        tenants = list(doc["runs"][0]["groups"]["tenant"])
        self.check_chart(root, "tenants",
                         bars=len(tenants) * len(doc["runs"]))
        fairness = self.table_rows(root, "fairness")
        for row, run in zip(fairness, doc["runs"]):
            weights = run["fairness"]["weights"]
            self.assertEqual(row[1], "%.3f" % run["fairness"]["jain_index"])
            self.assertEqual(row[2:], [
                "%.0f" % (run["groups"]["tenant"][t]["service_tokens"] /
                          weights[t]) for t in tenants])
        # Outcomes by priority, "all" first; queue apart from upstream.
        outcomes = self.table_rows(root, "outcomes")
        self.assertEqual(len(outcomes), sum(len(run["outcomes"])
                                            for run in doc["runs"]))
        first = doc["runs"][0]["outcomes"]
        self.assertEqual(outcomes[0], [load_text(doc["runs"][0]), "all"] + [
            str(first["all"][k]) for k in ("2xx", "429", "503", "other",
                                           "left", "retry_after", "retried",
                                           "retried_ok")])
        timing = self.table_rows(root, "server-timing")
        st0 = doc["runs"][0]["server_timing"]
        self.assertEqual(timing[0][1:4], ["%.1f" % st0["queue"][k]
                                          for k in ("mean", "p50", "p99")])
        self.assertEqual(timing[0][4:7], ["%.1f" % st0["upstream"][k]
                                          for k in ("mean", "p50", "p99")])
        scrape = self.table_rows(root, "scrape")
        self.assertEqual(len(scrape), sum(
            len(metrics) for run in doc["runs"]
            for metrics in run["scrape"].values()))
        # No repetitions in this report.
        self.assertIsNone(root.find("repeats"))

    def test_repetitions_are_summarised_per_level(self):
        doc = load(B)
        page = os.path.join(self.tmp, "b.html")
        r = self.bench("report", B, "--html", page)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(len(r.stdout.splitlines()), 2 + len(doc["runs"]))
        self.check_offline(page)
        root = self.check_rendered(self.dump_dom(page))
        by_level = levels(doc)
        # Each chart against load: one point a level, the repetitions'
        # mean.
        for chart in LOAD_CHARTS:
            self.check_chart(root, chart + "-concurrency",
                             lines=[len(by_level)] * 2)
        self.assertIsNone(root.find("search"))
        rows = self.table_rows(root, "repeats")
        self.assertEqual(len(rows), len(by_level) * len(KEY_METRICS))
        for row, ((level, runs), (field, decimals, count)) in zip(
                rows, [(lv, m) for lv in by_level.items()
                       for m in KEY_METRICS]):
            mean, std = stat(runs, field)
            cv = "%.3f" % (std / abs(mean)) if mean else "-"
            self.assertEqual(row, [load_text(runs[0]), field,
                                   "%s ± %s" % (fmt(mean, decimals),
                                                fmt(std, decimals)),
                                   cv, str(len(runs))])
        # The report's own summary, as it stands.
        summary = self.table_rows(root, "repeats-summary")
        self.assertEqual([row[0] for row in summary],
                         list(doc["repeats"]["metrics"]))

    def test_a_sparse_report_still_renders(self):
        # One run against llama-server alone: no groups, no fairness, no
        # outcomes, no scrape, no Server-Timing, figures left null.
        doc = load(A)
        run = doc["runs"][0]
        for key in ("groups", "fairness", "outcomes", "scrape", "cache"):
            del run[key]
        run["server_timing"] = None
        run["request_goodput"] = None
        run["p99_ttft_ms"] = None
        run["label"] = "a | b <i>"
        doc["runs"] = [run]
        del doc["search"]
        del doc["command"]
        path = self.write("sparse.json", doc)
        page = os.path.join(self.tmp, "sparse.html")
        r = self.bench("report", path, "--html", page)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        row = r.stdout.splitlines()[2].split(" | ")
        self.assertEqual(row[0], "| a \\| b <i>")
        self.assertEqual(row[6], "-")  # goodput
        self.assertEqual(row[8], "-")  # p99 TTFT
        with open(page) as f:
            text = f.read()
        self.check_offline(page)
        root = self.check_rendered(text)
        self.assertIn("a | b &lt;i&gt;", text)
        self.assertEqual([n.tag for n in root.walk() if n.tag == "i"], [])
        self.assertIn("No Server-Timing in the answers", text)
        for id_ in ("tenants", "outcomes", "scrape", "search", "repeats"):
            self.assertIsNone(root.find(id_), id_)
        # One point a curve: marked, no line to draw; the figures that
        # are null (p99 TTFT, goodput) are left out.
        for chart in LOAD_CHARTS:
            svg = root.find(chart + "-concurrency")
            points = [n for n in svg.walk() if n.tag == "circle"]
            self.assertEqual(len(points),
                             1 if chart in ("ttft", "requests") else 2)
            self.assertFalse([n for n in svg.walk()
                              if n.tag == "polyline"])

    def with_slo_figures(self, doc):
        """doc with the figures of SLO-aware admission (issue 40) made up
        for each run, different from run to run."""
        for k, run in enumerate(doc["runs"]):
            classes = {}
            for name, ttft, share in (("interactive", 500, 0.8),
                                      ("batch", 30000, 0.2)):
                classes[name] = {
                    "slo": {"ttft_ms": ttft, "tpot_ms": None,
                            "e2el_ms": None},
                    "share": share, "num_prompts": 10 + k, "served": 6,
                    "shed": 2, "refused": 1, "other": 1 + k, "left": 0,
                    "admitted": 7 + k, "met": 5,
                    "attainment": 5 / (10 + k),
                    "admitted_attainment": 5 / (7 + k),
                    "request_goodput": 1.25 + k, "median_ttft_ms": 40.0,
                    "p99_ttft_ms": 321.5 + k,
                    "median_predictor_error": 0.125,
                    "p90_predictor_error": 0.5 + k / 100}
            run["slo_classes"] = classes
            run["refusals"] = {
                "count": 3 + k, "retry_after": 3, "median_ms": 0.75 + k,
                "p99_ms": 2.5 + k,
                "by_kind": {"429 slo_ttft": {"count": 2 + k,
                                             "retry_after": 2,
                                             "median_ms": 0.5,
                                             "p99_ms": 1.0},
                            "429": {"count": 1, "retry_after": 1,
                                    "median_ms": 0.25, "p99_ms": 0.25}}}
            run["predictor"] = {"requests": 12, "median_error": 0.1 + k / 50,
                                "p90_error": 0.4, "median_signed_error":
                                -0.05}
            run.update({"shed": 4, "admitted_attainment": 10 / (14 + 2 * k),
                        "median_refusal_ms": 0.75 + k,
                        "p99_refusal_ms": 2.5 + k,
                        "median_predictor_error": 0.1 + k / 50,
                        "p90_predictor_error": 0.4})
        return doc

    def test_slo_figures_in_the_summary_the_page_and_compare(self):
        doc = self.with_slo_figures(load(B))
        path = self.write("slo.json", doc)
        page = os.path.join(self.tmp, "slo.html")
        r = self.bench("report", path, "--html", page)
        self.assertEqual((r.returncode, r.stderr), (0, ""))

        def pct(v):
            return "%.1f%%" % (100 * v)

        def class_cells(c):
            return ["ttft=%gms" % c["slo"]["ttft_ms"], str(c["num_prompts"]),
                    str(c["served"]), str(c["shed"]), str(c["refused"]),
                    str(c["other"]), pct(c["attainment"]),
                    pct(c["admitted_attainment"]),
                    "%.2f" % c["request_goodput"], "%.2f" % c["p99_ttft_ms"],
                    pct(c["median_predictor_error"]),
                    pct(c["p90_predictor_error"])]

        def refusal_cells(x):
            return [str(x["count"]), str(x["retry_after"]),
                    "%.2f" % x["median_ms"], "%.2f" % x["p99_ms"]]

        def predictor_cells(p):
            return [str(p["requests"]), pct(p["median_error"]),
                    pct(p["p90_error"])]

        # The summary: the runs, then a row per run and class, then a row
        # per run of refusals and predictor error.
        lines = r.stdout.splitlines()
        n = len(doc["runs"])
        at = 2 + n
        self.assertEqual(lines[at:at + 2], [
            "", "| run | class | SLOs | requests | served | shed | refused "
            "| other | attainment | of admitted | goodput req/s | TTFT p99 "
            "ms | pred. error p50 | pred. error p90 |"])
        rows = [[c.strip() for c in line.split("|")[1:-1]]
                for line in lines[at + 3:at + 3 + 2 * n]]
        self.assertEqual(rows, [[str(k), name] + class_cells(c)
                                for k, run in enumerate(doc["runs"])
                                for name, c in run["slo_classes"].items()])
        at += 3 + 2 * n
        self.assertEqual(lines[at + 1], "| run | refusals | with "
                         "Retry-After | refusal p50 ms | refusal p99 ms | "
                         "predicted | pred. error p50 | pred. error p90 |")
        rows = [[c.strip() for c in line.split("|")[1:-1]]
                for line in lines[at + 3:]]
        self.assertEqual(rows, [
            [str(k)] + refusal_cells(run["refusals"]) +
            predictor_cells(run["predictor"])
            for k, run in enumerate(doc["runs"])])

        # The page: the same tables, a run named by its index and load,
        # and the refusals by kind.
        self.check_offline(page)
        root = self.check_rendered(self.dump_dom(page))
        names = ["%d: %s" % (k, load_text(run))
                 for k, run in enumerate(doc["runs"])]
        self.assertEqual(self.table_rows(root, "slo-classes"), [
            [names[k], name] + class_cells(c)
            for k, run in enumerate(doc["runs"])
            for name, c in run["slo_classes"].items()])
        self.assertEqual(self.table_rows(root, "admission"), [
            [names[k]] + refusal_cells(run["refusals"]) +
            predictor_cells(run["predictor"])
            for k, run in enumerate(doc["runs"])])
        self.assertEqual(self.table_rows(root, "refusal-kinds"), [
            [names[k], kind] + refusal_cells(x)
            for k, run in enumerate(doc["runs"])
            for kind, x in run["refusals"]["by_kind"].items()])
        # The repetitions hold the SLO figures too.
        self.assertEqual(len(self.table_rows(root, "repeats")),
                         len(levels(doc)) * (len(KEY_METRICS)
                                             + len(SLO_METRICS)))

        # compare shows them where a file has them: A has none.
        page = os.path.join(self.tmp, "cmp.html")
        r = self.bench("compare", A, path, "--html", page)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        expected = expected_comparison([load(A), doc],
                                       ["bench-a.json", "slo.json"])
        self.assertEqual(r.stdout.splitlines()[:len(expected)], expected)
        self.assertEqual(len(expected), 2 + 3 * (len(KEY_METRICS)
                                                 + len(SLO_METRICS)))
        self.assertIn("| c=1 | p90_predictor_error | - | 0.4000 ± 0.0000 | "
                      "- |", expected)
        root = self.check_rendered(self.dump_dom(page))
        for field, _, _ in SLO_METRICS:
            self.check_chart(root, "cmp-" + field, bars=3)
        # Neither file has them: not a row.
        r = self.bench("compare", A, B)
        self.assertNotIn("predictor", r.stdout)

    def test_equal_figures_and_an_empty_report(self):
        doc = load(B)
        for run in doc["runs"]:
            run.update({k: 0 for k in ("request_throughput",
                                       "request_goodput",
                                       "output_throughput")})
            run["max_concurrency"] = 4
        page = os.path.join(self.tmp, "flat.html")
        r = self.bench("report", self.write("flat.json", doc), "--html",
                       page)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        with open(page) as f:
            self.check_rendered(f.read())
        doc["runs"] = []
        page = os.path.join(self.tmp, "empty.html")
        r = self.bench("report", self.write("empty.json", doc), "--html",
                       page)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(len(r.stdout.splitlines()), 2)
        with open(page) as f:
            self.check_rendered(f.read())

    def test_bad_input_is_one_line_and_exit_2(self):
        missing = os.path.join(self.tmp, "missing.json")
        not_json = self.write("x.json", {})
        with open(not_json, "w") as f:
            f.write("{\"tool\": ")
        other = self.write("other.json", {"runs": []})
        cases = [
            (("report", missing),
             "sluice-bench report: %s: No such file or directory\n"
             % missing),
            (("report", other),
             "sluice-bench report: %s: not a sluice-bench report (it "
             "needs \"tool\": \"sluice-bench\" and \"runs\")\n" % other),
            (("compare", A, missing),
             "sluice-bench compare: %s: No such file or directory\n"
             % missing),
            (("compare", A, other),
             "sluice-bench compare: %s: not a sluice-bench report (it "
             "needs \"tool\": \"sluice-bench\" and \"runs\")\n" % other),
            (("compare", A, self.tmp),
             "sluice-bench compare: %s: is a directory\n" % self.tmp),
            (("compare", A),
             "sluice-bench compare: give two reports or more; usage: "
             "sluice-bench compare A.json B.json [C.json ...] "
             "[--html OUT.html] [--json OUT.json]\n"),
            (("report", A, "--svg", "x"),
             "sluice-bench report: unknown option --svg; usage: "
             "sluice-bench report RUN.json [--html OUT.html]\n"),
            (("report", A, "--html"),
             "sluice-bench report: no value after --html; usage: "
             "sluice-bench report RUN.json [--html OUT.html]\n"),
        ]
        for args, stderr in cases:
            r = self.bench(*args)
            self.assertEqual((r.returncode, r.stdout, r.stderr),
                             (2, "", stderr))
        r = self.bench("compare", A, not_json)
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertRegex(r.stderr, r"\Asluice-bench compare: %s: not "
                         r"JSON: [^\n]+ \(line 1\)\n\Z" % re.escape(not_json))

    def test_compare_two_reports(self):
        docs = [load(A), load(B)]
        out_json = os.path.join(self.tmp, "cmp.json")
        page = os.path.join(self.tmp, "cmp.html")
        r = self.bench("compare", A, B, "--json", out_json, "--html", page)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        names = ["bench-a.json", "bench-b.json"]
        expected = expected_comparison(docs, names)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[:len(expected)], expected)
        # A's levels of the search, at rates B never ran, are named.
        rates = [load_text(run) for run in docs[0]["runs"]
                 if run["request_rate"]]
        self.assertEqual(lines[len(expected):len(expected) + 2], [
            "", "Not compared: levels of bench-a.json that no other file "
            "has: " + ", ".join(rates)])
        # B repeated every level, A did not: each difference is weighed
        # against B's spread, so none is "spread unknown".
        self.assertTrue(any("within noise" in x for x in expected))
        self.assertTrue(any("beyond noise" in x for x in expected))
        self.assertFalse(any("spread unknown" in x for x in expected))

        result = load(out_json)
        self.assertEqual([f["name"] for f in result["files"]], names)
        self.assertEqual([lv["load"] for lv in result["levels"]],
                         ["c=1", "c=2", "c=4"])
        for lv in result["levels"]:
            runs_a = [r_ for r_ in docs[0]["runs"]
                      if load_text(r_) == lv["load"]]
            runs_b = [r_ for r_ in docs[1]["runs"]
                      if load_text(r_) == lv["load"]]
            for m, (field, _, _) in zip(lv["metrics"], KEY_METRICS):
                self.assertEqual(m["metric"], field)
                (am, _), (bm, bstd) = stat(runs_a, field), stat(runs_b,
                                                               field)
                self.assertEqual(m["values"][1]["mean"], bm)
                self.assertEqual(m["values"][1]["std"], bstd)
                self.assertEqual(m["values"][0]["std"], None)
                if am:
                    self.assertEqual(m["diff_pct"][1],
                                     (bm - am) / am * 100.0)
                self.assertEqual(m["spread"][1], 2 * bstd)

        self.check_offline(page)
        root = self.check_rendered(self.dump_dom(page))
        self.assertEqual(len(self.table_rows(root, "comparison")),
                         len(expected) - 2)
        for field, _, _ in KEY_METRICS:
            svg = self.check_chart(root, "cmp-" + field, bars=2 * 3)
            # B's standard deviation drawn around each of its bars.
            self.assertEqual(len([n for n in svg.walk()
                                  if n.attrs.get("class") == "err"]), 3)

    def test_compare_three_reports_and_a_summary(self):
        # C: level 0 of B alone, with the report's own summary, which
        # compare takes over its runs; and a level A lacks.
        b = load(B)
        c = copy.deepcopy(b)
        c["runs"] = [run for run in c["runs"] if run["level"] == 0]
        c["repeats"] = {"metrics": {
            field: {"mean": stat(c["runs"], field)[0] * 1.5,
                    "std": 0.25, "cv": None, "n": 3}
            for field, _, _ in KEY_METRICS}}
        d = copy.deepcopy(c)
        del d["repeats"]
        extra = copy.deepcopy(d["runs"][0])
        extra.update({"level": 1, "max_concurrency": 8})
        d["runs"].append(extra)
        paths = [A, self.write("c.json", c), self.write("d.json", d)]
        r = self.bench("compare", *paths)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        names = ["bench-a.json", "c.json", "d.json"]
        docs = [load(p) for p in paths]
        expected = expected_comparison(docs, names)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[:len(expected)], expected)
        self.assertEqual(len(expected), 2 + len(KEY_METRICS))
        self.assertIn("Not compared: levels of d.json that bench-a.json "
                      "lacks: c=8", lines)
        # The summary's spread (0.25) is what c.json's cells weigh.
        row = expected[2].split(" | ")
        self.assertEqual(row[3], "%s ± 0.250" % fmt(
            stat(c["runs"], "request_throughput")[0] * 1.5, 3))


if __name__ == "__main__":
    st.main()
