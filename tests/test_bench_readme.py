"""bench/README.md's sluice-bench examples, run as a reader would copy
them: its first run (a sluice in front of a mock), and the harness's
examples against the sluice of bench/data/sluice.yaml (two demo models,
two tenants' keys). Only the ports change: the README's 8080 (a sluice),
8081 (a mock), 8090 (a sluice in front of two mocks) and 8091 and 8092
(the mocks);
the default --url, the README's 8080, comes from SLUICE_BENCH_URL."""

import json
import os
import re
import subprocess

import sluice_test as st

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
README = os.path.join(ROOT, "bench", "README.md")
CONFIG = os.path.join(ROOT, "bench", "data", "sluice.yaml")
BUILD = os.path.dirname(st.SLUICE)

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 300


def blocks(title):
    """The indented blocks of the section with this title, each a list of
    commands (a line ending in a backslash joined with the next)."""
    with open(README) as f:
        text = f.read()
    section = text.split("\n## %s\n" % title)[1]
    section = section.split("\n## ")[0]
    found, block, pending = [], [], ""
    for line in section.splitlines():
        if line.startswith("    "):
            pending += line.strip()
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            block.append(pending)
            pending = ""
        elif block and line.strip() == "":
            found.append(block)
            block = []
    if block:
        found.append(block)
    return found


class BenchReadme(st.TestCase):

    def setUp(self):
        super().setUp()
        self.blocks = blocks("sluice-bench, a harness for gateways")
        self.ports = {8080: st.free_port(), 8081: st.free_port(),
                      8090: st.free_port(), 8091: st.free_port(),
                      8092: st.free_port()}

    def localize(self, command):
        for theirs, ours in self.ports.items():
            command = command.replace("127.0.0.1:%d" % theirs,
                                      "127.0.0.1:%d" % ours)
            command = command.replace("--port %d" % theirs,
                                      "--port %d" % ours)
        command = command.replace("/tmp/", self.tmp + "/")
        return command.replace("build/", BUILD + "/")

    def run_block(self, block):
        """A block as one bash script from the repository root; what it
        starts in the background is stopped at its end."""
        script = "set -e\ntrap 'j=$(jobs -p); [ -z \"$j\" ] || " \
            "kill $j 2>/dev/null || true' EXIT\n" + \
            "\n".join(self.localize(c) for c in block)
        # The commands leave --url at its default, the README's 8080.
        env = dict(os.environ, SLUICE_BENCH_URL="http://127.0.0.1:%d" %
                   self.ports[8080])
        return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env,
                              capture_output=True, text=True,
                              timeout=SAFETY_NET_S)

    def the(self, containing):
        found = [b for b in self.blocks if any(containing in c for c in b)]
        self.assertEqual(len(found), 1, (containing, found))
        return found[0]

    def start_sluice(self):
        with open(CONFIG) as f:
            config = f.read()
        config = re.sub(r"build/tests/", BUILD + "/tests/", config)
        path = os.path.join(self.tmp, "sluice.yaml")
        with open(path, "w") as f:
            f.write(config)
        s = self.sluice("--config", path)  # on a free port: the 8080
        self.ports[8080] = s.port
        return s

    def scenario(self, out, name):
        m = re.search(r"^run 0, %s: (\{.*\})$" % name, out, re.MULTILINE)
        self.assertIsNotNone(m, out)
        return json.loads(m.group(1))

    def test_a_first_run(self):
        (block,) = blocks("A first run")
        r = self.run_block(block)
        # The mock's and sluice's logs go to stderr; sluice-bench's none,
        # and sluice's access log, a line a request, is off.
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("sluice-bench:", r.stderr)
        self.assertNotIn(" access id=", r.stderr)
        rows = re.findall(r"^\| run \| 50 \| (\d+) \| 50 \| 0 \|", r.stdout,
                          re.MULTILINE)
        self.assertEqual(rows, ["1", "2", "4", "8", "16"])

    def test_the_setup_line_is_data_sluice_yaml(self):
        self.assertEqual(self.the("--config bench/data/sluice.yaml"),
                         ["build/sluice --config bench/data/sluice.yaml &"])

    def test_workloads_tenants_load_and_metrics(self):
        self.start_sluice()
        r = self.run_block(self.the("--dataset sharegpt"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\n\| run \| 24 \| 4 \| 24 \| 0 \|")
        r = self.run_block(self.the("--tokenize on"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        r = self.run_block(self.the("--dataset shared-prefix"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        r = self.run_block(self.the("--tenant"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        rows = re.findall(r"^\| 0 \| (alice|bob) \| ([\d.]+) \| (\d+) \|",
                          r.stdout, re.MULTILINE)
        self.assertEqual([(n, w) for n, w, _ in rows],
                         [("alice", "3"), ("bob", "1")])
        self.assertEqual(sum(int(k) for _, _, k in rows), 40)
        r = self.run_block(self.the("--arrivals gamma"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(len(re.findall(r"^\| run \| \d+ \| 6/s \|",
                                        r.stdout, re.MULTILINE)), 2)
        r = self.run_block(self.the("--slo ttft=500ms"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        for cls in ("urgent", "normal"):
            self.assertRegex(r.stdout, r"\n\| %s \| \d+ \| 8 \|" % cls)
        # A mix of SLO classes, without their headers then with them: a
        # sluice with SLO-aware admission may shed some of the second run
        # (exit 1). Every request is in a class.
        r = self.run_block(self.the("--slo-mix"))
        self.assertIn(r.returncode, (0, 1), r.stderr)
        rows = re.findall(r"^\| 0 \| (interactive|batch) \| (\S+) \| "
                          r"(\d+) \|", r.stdout, re.MULTILINE)
        self.assertEqual([(c, slo) for c, slo, _ in rows],
                         [("interactive", "ttft=500ms/tpot=50ms"),
                          ("batch", "ttft=30000ms")] * 2)
        self.assertEqual(sum(int(n) for _, _, n in rows), 2 * 24)
        for name in ("slo-off.json", "slo-on.json"):
            with open(os.path.join(self.tmp, name)) as f:
                (run,) = json.load(f)["runs"]
            self.assertEqual(sorted(run["slo_classes"]),
                             ["batch", "interactive"])

    def test_scenarios_search_and_reports(self):
        self.start_sluice()
        r = self.run_block(self.the("--cancel-share"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        cancel = self.scenario(r.stdout, "cancel")
        self.assertGreater(cancel["left"], 0)
        self.assertEqual(cancel["slot_freed"], cancel["left"])
        r = self.run_block(self.the("--model-mix"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        swap = self.scenario(r.stdout, "swap")
        self.assertEqual(sorted(swap["cold_ttft_ms"]), ["slow", "tiny"])
        # tiny slow tiny tiny, twice: every change of model is a switch.
        self.assertEqual(swap["switches"], 3)
        r = self.run_block(self.the("--search on"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertRegex(r.stdout, r"highest rate within the SLOs: [\d.]+/s"
                         r"|no rate met the SLOs")
        r = self.run_block(self.the("compare"))
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("a.json", "a.jsonl", "a.csv", "a.html", "b.json",
                     "a-again.html"):
            self.assertTrue(os.path.getsize(os.path.join(self.tmp, name)))
        with open(os.path.join(self.tmp, "a.json")) as f:
            doc = json.load(f)
        self.assertEqual(len(doc["runs"]), 4)
        self.assertEqual(doc["repeats"]["metrics"]["completed"]["n"], 2)

    def test_failover(self):
        r = self.run_block(self.the("--kill-at"))
        # Requests out on the killed mock may be lost: exit 1 then.
        self.assertIn(r.returncode, (0, 1), r.stderr)
        failover = self.scenario(r.stdout, "failover")
        self.assertTrue(failover["killed"])
        self.assertGreaterEqual(failover["in_flight"], 1)
        self.assertGreater(failover["completed_after"], 0)


if __name__ == "__main__":
    st.main()
