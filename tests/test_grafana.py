"""The Grafana dashboard (deploy/grafana/sluice-dashboard.json), its
provisioning and the Prometheus configuration beside it.

A real sluice, in front of a real llama-server with the demo model and
with a key of its configuration file, serves the requests whose series the
dashboard shows (a keyed one, one over the key's limit, one whose client
leaves); its /metrics is then the reference. Every PromQL expression of the
dashboard, its panels' and its template variables', is parsed (a small
parser of PromQL's grammar, below) and must name only series sluice
exports, filter and group by labels those series have, compare labels with
values they take, rate only counters and histograms, take quantiles of
buckets grouped by le, and divide series whose labels match. The
dashboard's JSON must be one Grafana reads: ids unique, every panel on the
data source variable, every target with its refId, every panel within the
24 columns and none overlapping. The provisioning files must point
Grafana at the Prometheus service and at the folder where
deploy/docker-compose.monitoring.yml mounts the dashboard, and Prometheus
must scrape the sluice service of deploy/docker-compose.yml on its port.
"""

import hashlib
import json
import os
import re
import shutil
import socket
import tempfile

import yaml

import promcheck
import sluice_test as st

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEPLOY = os.path.join(ROOT, "deploy")
DASHBOARD = os.path.join(DEPLOY, "grafana", "sluice-dashboard.json")
PROVISIONING = os.path.join(DEPLOY, "grafana", "provisioning")
PROMETHEUS = os.path.join(DEPLOY, "prometheus", "prometheus.yml")
COMPOSE = os.path.join(DEPLOY, "docker-compose.yml")
MONITORING = os.path.join(DEPLOY, "docker-compose.monitoring.yml")

# Columns in a Grafana dashboard's grid.
GRID_COLUMNS = 24

# Labels Prometheus adds to every series it scrapes (the target's).
TARGET_LABELS = {"job", "instance"}

# What stands for Grafana's interval variables when an expression is
# parsed: any duration will do.
GRAFANA_INTERVAL = "5m"

ADMIN_KEY = "grafana-test-admin"
KEY_NAME = "team-a"
KEY_SECRET = "grafana-test-team-a"

# PromQL's functions (Prometheus 3), its aggregations and its keywords:
# any other identifier is a metric name.
FUNCTIONS = set("""
abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time
ceil changes clamp clamp_max clamp_min cos cosh count_over_time
day_of_month day_of_week day_of_year days_in_month deg delta deriv
double_exponential_smoothing exp floor histogram_avg histogram_count
histogram_fraction histogram_quantile histogram_stddev histogram_stdvar
histogram_sum holt_winters hour idelta increase info irate label_join
label_replace last_over_time ln log10 log2 mad_over_time max_over_time
min_over_time minute month pi predict_linear present_over_time
quantile_over_time rad rate resets round scalar sgn sin sinh sort
sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time
stdvar_over_time sum_over_time tan tanh time timestamp vector year
""".split())
AGGREGATIONS = set("""
avg bottomk count count_values group limit_ratio limitk max min quantile
stddev stdvar sum topk
""".split())
# Aggregations whose first argument is a parameter.
PARAMETRIC = {"bottomk", "count_values", "limit_ratio", "limitk", "quantile",
              "topk"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right",
            "bool", "offset", "and", "or", "unless", "atan2", "inf", "nan"}
# Functions over a range vector of counters.
COUNTER_FUNCTIONS = {"rate", "irate", "increase", "resets"}
# Functions that keep their vector argument's labels; the others below
# make a scalar or a vector without labels.
LABEL_FREE = {"time", "pi", "vector", "scalar", "absent", "absent_over_time"}

TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)
  | (?P<number>0x[0-9a-fA-F]+|\d*\.?\d+(?:[eE][+-]?\d+)?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>==|!=|=~|!~|<=|>=|[-+*/%^<>=(){}\[\],:@])
""", re.VERBOSE)

# Binary operators by precedence, lowest first; ^ binds right.
PRECEDENCE = [{"or"}, {"and", "unless"}, {"==", "!=", "<=", "<", ">=", ">"},
              {"+", "-"}, {"*", "/", "%", "atan2"}, {"^"}]
COMPARISONS = PRECEDENCE[2]


class QueryError(AssertionError):
    pass


def tokenize(expr):
    tokens, i = [], 0
    while i < len(expr):
        m = TOKEN.match(expr, i)
        if not m:
            raise QueryError("cannot read %r at %r" % (expr, expr[i:]))
        if m.lastgroup != "space":
            tokens.append((m.lastgroup, m.group()))
        i = m.end()
    return tokens


class Parser:
    """PromQL's grammar, into tuples: ("selector", name, [(label, op,
    value)]), ("range", expr), ("call", name, [args]), ("agg", name,
    grouping, without, param, expr), ("binary", op, lhs, rhs, on, labels),
    ("number",), ("string",), ("unary", expr)."""

    def __init__(self, expr):
        self.expr = expr
        self.tokens = tokenize(expr)
        self.i = 0

    def fail(self, what):
        rest = " ".join(t for _, t in self.tokens[self.i:self.i + 4])
        raise QueryError("%s in %r, at %r" % (what, self.expr, rest or "end"))

    def peek(self, ahead=0):
        k = self.i + ahead
        return self.tokens[k] if k < len(self.tokens) else (None, None)

    def take(self, text=None):
        kind, tok = self.peek()
        if kind is None or (text is not None and tok != text):
            self.fail("expected %r" % text)
        self.i += 1
        return tok

    def at(self, text):
        return self.peek()[1] == text

    def parse(self):
        node = self.binary(0)
        if self.i != len(self.tokens):
            self.fail("unexpected token")
        return node

    def binary(self, level):
        if level == len(PRECEDENCE):
            return self.unary()
        lhs = self.binary(level + 1)
        while self.peek()[1] in PRECEDENCE[level]:
            op = self.take()
            if self.at("bool"):
                self.take()
                op += " bool"
            on, labels = None, []
            if self.peek()[1] in ("on", "ignoring"):
                on = self.take() == "on"
                labels = self.labels()
            if self.peek()[1] in ("group_left", "group_right"):
                self.take()
                if self.at("("):
                    self.labels()
            # ^ is right-associative: its right side may hold another.
            rhs = self.binary(level if op == "^" else level + 1)
            lhs = ("binary", op, lhs, rhs, on, labels)
        return lhs

    def unary(self):
        if self.peek()[1] in ("-", "+"):
            self.take()
            return ("unary", self.unary())
        return self.postfix(self.primary())

    def postfix(self, node):
        while True:
            if self.at("["):
                self.take()
                self.duration()
                if self.at(":"):
                    self.take()
                    if not self.at("]"):
                        self.duration()
                self.take("]")
                node = ("range", node)
            elif self.at("offset"):
                self.take()
                if self.at("-"):
                    self.take()
                self.duration()
            elif self.at("@"):
                self.take()
                if self.peek()[1] in ("start", "end"):
                    self.take()
                    self.take("(")
                    self.take(")")
                else:
                    self.number()
            else:
                return node

    def duration(self):
        if self.peek()[0] != "duration":
            self.fail("expected a duration")
        self.take()

    def number(self):
        if self.peek()[0] != "number":
            self.fail("expected a number")
        self.take()

    def labels(self):
        self.take("(")
        names = []
        while not self.at(")"):
            if self.peek()[0] != "ident":
                self.fail("expected a label name")
            names.append(self.take())
            if not self.at(")"):
                self.take(",")
        self.take(")")
        return names

    def grouping(self):
        if self.peek()[1] in ("by", "without"):
            without = self.take() == "without"
            return self.labels(), without
        return None, False

    def primary(self):
        kind, tok = self.peek()
        if tok == "(":
            self.take()
            node = self.binary(0)
            self.take(")")
            return node
        if kind in ("number", "duration") or tok in ("inf", "nan"):
            self.take()
            return ("number",)
        if kind == "string":
            self.take()
            return ("string",)
        if tok == "{":
            self.fail("a selector without a metric name")
        if kind != "ident":
            self.fail("unexpected token")
        if tok in AGGREGATIONS and self.peek(1)[1] in ("(", "by", "without"):
            self.take()
            grouping, without = self.grouping()
            args = self.arguments()
            if grouping is None:
                grouping, without = self.grouping()
            if len(args) != (2 if tok in PARAMETRIC else 1):
                self.fail("%s takes %d arguments"
                          % (tok, 2 if tok in PARAMETRIC else 1))
            return ("agg", tok, grouping, without,
                    args[0] if len(args) == 2 else None, args[-1])
        if self.peek(1)[1] == "(":
            if tok not in FUNCTIONS:
                self.fail("%s is not a PromQL function" % tok)
            self.take()
            return ("call", tok, self.arguments())
        if tok in KEYWORDS or tok in FUNCTIONS or tok in AGGREGATIONS:
            self.fail("%s where a series belongs" % tok)
        name = self.take()
        matchers = []
        if self.at("{"):
            self.take()
            while not self.at("}"):
                if self.peek()[0] != "ident":
                    self.fail("expected a label name")
                label = self.take()
                op = self.take()
                if op not in ("=", "!=", "=~", "!~"):
                    self.fail("expected a label matcher")
                if self.peek()[0] != "string":
                    self.fail("expected a label value")
                matchers.append((label, op, self.take()[1:-1]))
                if not self.at("}"):
                    self.take(",")
            self.take("}")
        return ("selector", name, matchers)

    def arguments(self):
        self.take("(")
        args = []
        while not self.at(")"):
            args.append(self.binary(0))
            if not self.at(")"):
                self.take(",")
        self.take(")")
        return args


def substitute(expr, variables):
    """expr with Grafana's interval variables made durations; every other
    $variable must be one the dashboard defines."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b|"
                  r"\$\{__(rate_interval|interval|range)\}",
                  GRAFANA_INTERVAL, expr)
    for name in re.findall(r"\$\{?(\w+)", expr):
        if name not in variables:
            raise QueryError("%r uses $%s, which the dashboard does not "
                             "define" % (expr, name))
    return expr


class Exported:
    """What a sluice's /metrics exports: each series name's family type,
    label names and the values each label takes."""

    def __init__(self, text):
        samples = promcheck.check(text)
        self.types = dict(re.findall(r"(?m)^# TYPE (\S+) (\S+)$", text))
        self.labels = {}
        for name in self.types:
            suffixes = (("_bucket", "_sum", "_count")
                        if self.types[name] == "histogram" else ("",))
            for s in suffixes:
                self.labels[name + s] = {}
        for name, labels in samples:
            found = self.labels.setdefault(name, {})
            for label, value in labels:
                found.setdefault(label, set()).add(value)
        self.sampled = {name for name, _ in samples}

    def family(self, name):
        return promcheck.family_of(name, self.types)


class Checker:
    """Checks one expression against an exposition, returning the label
    names of its result (None for a scalar)."""

    def __init__(self, exported, expr):
        self.exported = exported
        self.expr = expr

    def fail(self, what):
        raise QueryError("%s, in %r" % (what, self.expr))

    def labels_of(self, node):
        kind = node[0]
        if kind == "selector":
            return self.selector(node)
        if kind == "range":
            return self.labels_of(node[1])
        if kind in ("number", "string"):
            return None
        if kind == "unary":
            return self.labels_of(node[1])
        if kind == "call":
            return self.call(node)
        if kind == "agg":
            return self.aggregation(node)
        if kind == "binary":
            return self.binary(node)
        raise AssertionError(node)

    def selector(self, node):
        _, name, matchers = node
        if name not in self.exported.labels:
            self.fail("%s is not a series sluice exports" % name)
        if name not in self.exported.sampled:
            self.fail("%s has no samples: make the test produce it, so that "
                      "its labels can be checked" % name)
        have = self.exported.labels[name]
        for label, op, value in matchers:
            if label in TARGET_LABELS:
                continue
            if label not in have:
                self.fail("%s has no label %s (it has %s)"
                          % (name, label, ", ".join(sorted(have)) or "none"))
            if op == "=" and "$" not in value and value not in have[label]:
                self.fail('%s{%s="%s"}: %s takes %s' % (
                    name, label, value, label, ", ".join(sorted(have[label]))))
            if op in ("=~", "!~"):
                try:
                    re.compile(value)
                except re.error as e:
                    self.fail("%s: bad regex %r: %s" % (name, value, e))
        return set(have) | TARGET_LABELS

    def selectors(self, node):
        if node[0] == "selector":
            yield node
        for child in node[1:]:
            if isinstance(child, tuple):
                yield from self.selectors(child)
            elif isinstance(child, list):
                for c in child:
                    if isinstance(c, tuple):
                        yield from self.selectors(c)

    def call(self, node):
        _, name, args = node
        results = [self.labels_of(a) for a in args]
        if name in COUNTER_FUNCTIONS:
            if len(args) != 1 or args[0][0] != "range":
                self.fail("%s takes a range vector" % name)
            for sel in self.selectors(args[0]):
                family = self.exported.family(sel[1])
                if self.exported.types.get(family) not in ("counter",
                                                           "histogram"):
                    self.fail("%s of %s, a %s" % (
                        name, sel[1], self.exported.types.get(family)))
        if name == "histogram_quantile":
            if len(args) != 2 or results[1] is None:
                self.fail("histogram_quantile takes a quantile and a vector")
            if "le" not in results[1]:
                self.fail("histogram_quantile of a vector without le (group "
                          "by le)")
            if not all(s[1].endswith("_bucket")
                       for s in self.selectors(args[1])):
                self.fail("histogram_quantile of series that are not "
                          "buckets")
            return results[1] - {"le"}
        if name in LABEL_FREE:
            return set() if name != "scalar" else None
        vectors = [r for r in results if r is not None]
        return vectors[0] if vectors else None

    def aggregation(self, node):
        _, name, grouping, without, param, expr = node
        if param is not None:
            self.labels_of(param)
        inner = self.labels_of(expr)
        if inner is None:
            self.fail("%s of a scalar" % name)
        if grouping is None:
            return set()
        for label in grouping:
            if label not in inner:
                self.fail("%s by %s: the series inside have no %s (they "
                          "have %s)" % (name, label, label,
                                        ", ".join(sorted(inner))))
        return inner - set(grouping) if without else set(grouping)

    def binary(self, node):
        _, op, lhs, rhs, on, labels = node
        left, right = self.labels_of(lhs), self.labels_of(rhs)
        if left is None or right is None:
            return left if right is None else right
        if on is not None:
            for label in labels:
                if on and (label not in left or label not in right):
                    self.fail("on(%s): not on both sides" % label)
            return left
        if op != "or" and left != right:
            self.fail("%s between series with different labels (%s and "
                      "%s): nothing would match" % (
                          op, sorted(left), sorted(right)))
        return left


def check_expr(exported, expr, variables):
    """Parses a panel's expression and checks it; returns its labels."""
    expr = substitute(expr, variables)
    return Checker(exported, expr).labels_of(Parser(expr).parse())


def check_variable_query(exported, query, variables):
    """label_values(SELECTOR, LABEL), as Grafana's Prometheus data source
    reads it: the selector must be exported and have the label."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query)
    if not m:
        raise QueryError("%r is not label_values(selector, label)" % query)
    labels = check_expr(exported, m.group(1), variables)
    if m.group(2) not in labels:
        raise QueryError("%r: %s has no label %s" % (query, m.group(1),
                                                     m.group(2)))


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def panels(dashboard):
    """Every panel, those inside collapsed rows too."""
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])


def queries(dashboard):
    """[(where, expr)] for every panel target of the dashboard."""
    found = []
    for p in panels(dashboard):
        for t in p.get("targets", []):
            found.append(("panel %r, target %s" % (p["title"], t["refId"]),
                          t["expr"]))
    return found


def variable_queries(dashboard):
    found = []
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]
            found.append((v["name"], q["query"] if isinstance(q, dict)
                          else q))
    return found


def variables(dashboard):
    return {v["name"] for v in dashboard["templating"]["list"]}


def sha256(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


class Dashboard(st.TestCase):
    """The dashboard's queries against a real sluice's /metrics."""

    @classmethod
    def setUpClass(cls):
        ls = st.LlamaServer(st.MODEL_TINY, slots=2)
        try:
            cls.exported = Exported(cls.serve_and_scrape(ls))
        finally:
            ls.kill()

    @staticmethod
    def serve_and_scrape(ls):
        """Starts sluice in front of ls (an upstream it polls, so that the
        slots-busy series exist) with one key limited to one request a
        minute; sends a keyed request, one over the limit, one whose
        client leaves; returns /metrics."""
        tmp = tempfile.mkdtemp(prefix="sluice-test-")
        config = os.path.join(tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write("keys:\n  %s:\n    hash: %s\n    rpm: 1\n"
                    % (KEY_NAME, sha256(KEY_SECRET)))
        s = st.Sluice("--upstream", ls.url, "--config", config,
                      "--admin-key", ADMIN_KEY)
        try:
            keyed = {"Authorization": "Bearer " + KEY_SECRET,
                     "Content-Type": "application/json"}
            body = json.dumps({"messages": [{"role": "user",
                                             "content": "Hello"}],
                               "max_tokens": 8, "stream": True}).encode()
            assert s.post("/v1/chat/completions", body,
                          headers=keyed).status == 200
            # The key's second request within the minute: 429, key_limit.
            assert s.post("/v1/chat/completions", body,
                          headers=keyed).status == 429
            admin = {"Authorization": "Bearer " + ADMIN_KEY}
            # A client that leaves before its answer: 499.
            long = json.dumps({"messages": [{"role": "user",
                                             "content": "Count to 1000"}],
                               "max_tokens": 1000,
                               "ignore_eos": True}).encode()
            c = st.RawClient(s.port)
            c.request("POST", "/v1/chat/completions", body=long,
                      headers=admin)
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            st.wait_until(lambda: re.search(
                r'(?m)^sluice_requests_total\{[^}]*code="499"\}',
                s.get("/metrics", headers=admin).body.decode()), 30,
                "sluice to count the client that left")
            return s.get("/metrics", headers=admin).body.decode()
        finally:
            assert s.stop() == 0
            shutil.rmtree(tmp, ignore_errors=True)

    def test_every_panel_query_names_exported_series_and_labels(self):
        d = load_dashboard()
        found = queries(d)
        self.assertGreater(len(found), 40)
        names = set()
        for where, expr in found:
            with self.subTest(where):
                check_expr(self.exported, expr, variables(d))
            names |= set(re.findall(r"\b(?:sluice|process)_[a-z0-9_]+",
                                    expr))
        # What the issue asks the dashboard to show.
        for name in ("sluice_requests_total", "sluice_rejected_total",
                     "sluice_queue_depth", "sluice_queue_wait_seconds_bucket",
                     "sluice_time_to_first_token_seconds_bucket",
                     "sluice_request_duration_seconds_bucket",
                     "sluice_inter_token_seconds_bucket",
                     "sluice_generated_tokens_total",
                     "sluice_upstream_slots_busy", "sluice_upstream_slots",
                     "sluice_key_requests_total",
                     "sluice_key_completion_tokens_total",
                     "sluice_slo_requests_total",
                     "sluice_slo_ttft_prediction_ratio_bucket"):
            self.assertIn(name, names)

    def test_every_variable_query_names_an_exported_label(self):
        d = load_dashboard()
        found = variable_queries(d)
        self.assertEqual(sorted(n for n, _ in found),
                         ["instance", "job", "model", "upstream"])
        for name, query in found:
            with self.subTest(variable=name):
                check_variable_query(self.exported, query, variables(d))

    def test_the_checks_fail_on_wrong_queries(self):
        """Each mistake below is one the checks above must catch: a test
        that passes whatever the dashboard says would be worth nothing."""
        good = 'sum by (code) (rate(sluice_requests_total{code="200"}[5m]))'
        check_expr(self.exported, good, set())
        wrong = [
            # A series sluice does not export (a typo).
            "sum(rate(sluice_request_total[5m]))",
            # Another program's series.
            "rate(http_requests_total[5m])",
            # A label the series lacks, filtered or grouped by.
            'sum(rate(sluice_requests_total{model="x"}[5m]))',
            "sum by (reason) (rate(sluice_requests_total[5m]))",
            # A value the label never takes.
            'sum(rate(sluice_slo_requests_total{outcome="dropped"}[5m]))',
            # A histogram's family name, which has no samples of its own.
            "rate(sluice_queue_wait_seconds[5m])",
            # Quantiles without le, or of what are not buckets.
            "histogram_quantile(0.9, sum by (priority) "
            "(rate(sluice_queue_wait_seconds_bucket[5m])))",
            "histogram_quantile(0.9, sum by (le) "
            "(rate(sluice_queue_wait_seconds_count[5m])))",
            # rate of a gauge; rate of an instant vector.
            "rate(sluice_queue_depth[5m])",
            "rate(sluice_requests_total)",
            # Series whose labels differ: the division matches nothing.
            "sum by (key) (rate(sluice_key_requests_total[5m])) / "
            "sum(rate(sluice_requests_total[5m]))",
            # Not a function; unbalanced; a nameless selector.
            "sluice_rate(sluice_requests_total[5m])",
            "sum(rate(sluice_requests_total[5m])",
            '{__name__="sluice_requests_total"}',
            # A variable the dashboard does not define.
            'sluice_queue_depth{model=~"$modle"}',
        ]
        for expr in wrong:
            with self.subTest(expr=expr):
                with self.assertRaises(QueryError):
                    check_expr(self.exported, expr, {"model"})
        with self.assertRaises(QueryError):
            check_variable_query(self.exported,
                                 "label_values(sluice_inflight, model)", set())


class DashboardFile(st.TestCase):
    """The JSON as Grafana reads it, and the files that put it there."""

    def test_panels_are_well_formed(self):
        d = load_dashboard()
        self.assertEqual(d["uid"], "sluice")
        self.assertIsInstance(d["schemaVersion"], int)
        self.assertGreaterEqual(d["schemaVersion"], 36)
        (ds,) = [v for v in d["templating"]["list"]
                 if v["type"] == "datasource"]
        self.assertEqual((ds["name"], ds["query"]),
                         ("datasource", "prometheus"))
        ids, cells = set(), {}
        for p in panels(d):
            with self.subTest(panel=p.get("title")):
                self.assertNotIn(p["id"], ids)
                ids.add(p["id"])
                self.assertTrue(p["title"])
                g = p["gridPos"]
                self.assertTrue(g["w"] > 0 and g["h"] > 0 and g["x"] >= 0
                                and g["y"] >= 0)
                self.assertLessEqual(g["x"] + g["w"], GRID_COLUMNS)
                for x in range(g["x"], g["x"] + g["w"]):
                    for y in range(g["y"], g["y"] + g["h"]):
                        self.assertNotIn((x, y), cells, "overlaps %r"
                                         % cells.get((x, y)))
                        cells[(x, y)] = p["title"]
                if p["type"] == "row":
                    continue
                self.assertEqual(p["datasource"], {"type": "prometheus",
                                                   "uid": "${datasource}"})
                refs = [t["refId"] for t in p["targets"]]
                self.assertGreater(len(refs), 0)
                self.assertEqual(len(refs), len(set(refs)))
                for t in p["targets"]:
                    self.assertTrue(t["refId"] and t["expr"])
                    self.assertEqual(t.get("datasource", p["datasource"]),
                                     p["datasource"])
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                self.assertEqual(v["datasource"], {"type": "prometheus",
                                                   "uid": "${datasource}"})

    def test_provisioning_points_at_prometheus_and_the_dashboard(self):
        with open(MONITORING) as f:
            monitoring = yaml.safe_load(f)["services"]
        with open(COMPOSE) as f:
            base = yaml.safe_load(f)["services"]
        grafana = mounts(monitoring["grafana"])
        prometheus = mounts(monitoring["prometheus"])

        # Grafana reads its provisioning folder from the repository's.
        self.assertEqual(
            os.path.realpath(grafana["/etc/grafana/provisioning"]),
            os.path.realpath(PROVISIONING))
        # The data source: the prometheus service, on the port Prometheus
        # listens on (its default, 9090, unless the command says).
        with open(os.path.join(PROVISIONING, "datasources",
                               "prometheus.yml")) as f:
            (source,) = yaml.safe_load(f)["datasources"]
        self.assertEqual(source["type"], "prometheus")
        listen = [a.split("=", 1)[1]
                  for a in monitoring["prometheus"].get("command", [])
                  if a.startswith("--web.listen-address=")] or [":9090"]
        self.assertEqual(source["url"], "http://prometheus:%s"
                         % listen[-1].rsplit(":", 1)[1])
        self.assertEqual(source["access"], "proxy")

        # The dashboards provider reads a folder in the container where
        # the compose file mounts the repository's dashboard.
        with open(os.path.join(PROVISIONING, "dashboards",
                               "sluice.yml")) as f:
            (provider,) = yaml.safe_load(f)["providers"]
        self.assertEqual(provider["type"], "file")
        folder = provider["options"]["path"].rstrip("/")
        shown = {target: source for target, source in grafana.items()
                 if os.path.dirname(target) == folder
                 or target == folder}
        self.assertEqual([os.path.realpath(s) for s in shown.values()],
                         [os.path.realpath(DASHBOARD)])

        # Prometheus reads deploy/prometheus/prometheus.yml, which scrapes
        # the sluice service of deploy/docker-compose.yml on the port
        # sluice listens on in its container.
        config = [a.split("=", 1)[1]
                  for a in monitoring["prometheus"]["command"]
                  if a.startswith("--config.file=")]
        self.assertEqual(len(config), 1)
        self.assertEqual(os.path.realpath(container_file(prometheus,
                                                         config[0])),
                         os.path.realpath(PROMETHEUS))
        with open(PROMETHEUS) as f:
            (job,) = [j for j in yaml.safe_load(f)["scrape_configs"]
                      if j["job_name"] == "sluice"]
        self.assertEqual(job.get("metrics_path", "/metrics"), "/metrics")
        (targets,) = [c["targets"] for c in job["static_configs"]]
        port = re.search(r":(\d+)$", base["sluice"]["ports"][0]).group(1)
        self.assertEqual(targets, ["sluice:%s" % port])


def mounts(service):
    """{container path: host path} of a compose service's bind mounts,
    host paths relative to deploy/ (compose's project directory)."""
    found = {}
    for v in service.get("volumes", []):
        parts = v.split(":")
        if parts[0].startswith((".", "/")):
            found[parts[1]] = os.path.normpath(os.path.join(DEPLOY,
                                                            parts[0]))
    return found


def container_file(mounted, path):
    """The host file behind a container path, through mounted."""
    for target, source in mounted.items():
        if path == target:
            return source
        if path.startswith(target.rstrip("/") + "/"):
            return os.path.join(source, path[len(target.rstrip("/")) + 1:])
    raise AssertionError("%s is in no mount" % path)


if __name__ == "__main__":
    st.main()
