"""The deployment files that cannot run whole here: the systemd unit with its
environment file, and the Kubernetes manifests.

systemd cannot boot in a test, so the unit is checked by systemd-analyze
(verify, which must print nothing; security, which must rate it OK) and
read for the settings sluice's shutdown and sandbox rely on; the
environment file must list every option sluice has, with its true default,
and those defaults must start a real sluice. The manifests are parsed
(YAML, each object named, the kustomization complete), their programs are
run here with the manifests' own arguments (a real llama-server and a real
sluice), their probes are requested from them, the HPA's metric must be on
sluice's /metrics, and the numbers that must agree across files do. The
monitoring override of the compose file is parsed and its files must exist
(tests/test_grafana.py checks what they say).
"""

import os
import re
import shutil
import subprocess

import yaml

import sluice_test as st
from dns_server import DnsServer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
UNIT = os.path.join(ROOT, "deploy", "systemd", "sluice.service")
ENV_FILE = os.path.join(ROOT, "deploy", "systemd", "sluice.env")
K8S = os.path.join(ROOT, "deploy", "kubernetes")
COMPOSE = os.path.join(ROOT, "deploy", "docker-compose.yml")
MONITORING = os.path.join(ROOT, "deploy", "docker-compose.monitoring.yml")

# Where `meson install` puts sluice with meson's default prefix (/usr/local)
# and bindir (bin).
INSTALLED_SLUICE = "/usr/local/bin/sluice"

# What sluice takes after --drain-timeout before it exits: about 1 s for
# clients to take the last answers (src/relay/README.md, "Draining").
DRAIN_FLUSH_S = 1

# Connections the kubelet's probes may hold on llama-server at once
# (readiness and liveness).
PROBE_CONNECTIONS = 2

# A test-only key, standing for the Secret the manifests name.
UPSTREAM_KEY = "deploy-test-key"


def sluice_options():
    """{environment variable: default} for every option in sluice --help."""
    text = subprocess.run([st.SLUICE, "--help"], check=True,
                          capture_output=True, text=True).stdout
    text = re.sub(r"\n\s+", " ", text)
    return dict(re.findall(r"\[((?:SLUICE|OTEL)_\w+); default: ([^\]]*)\]",
                           text))


def seconds(value):
    """A sluice duration ("30", "0.5", "50ms") in seconds."""
    if value.endswith("ms"):
        return float(value[:-2]) / 1000
    return float(value)


def unit_settings():
    """{key: [values]} of every setting in the unit, comments left out."""
    settings = {}
    with open(UNIT) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;[":
                continue
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def env_file_lines():
    """[(name, value)] of the file's commented-out SLUICE_ (and
    OpenTelemetry's OTEL_) settings."""
    with open(ENV_FILE) as f:
        return re.findall(r"^#((?:SLUICE|OTEL)_\w+)=(.*)$", f.read(),
                          re.MULTILINE)


def systemd_analyze(*args):
    tool = shutil.which("systemd-analyze")
    assert tool, ("no systemd-analyze: deploy/setup.sh --tests installs "
                  "systemd")
    return subprocess.run([tool, *args], capture_output=True, text=True)


class Systemd(st.TestCase):

    def test_systemd_analyze_verify_says_nothing(self):
        with open(UNIT) as f:
            text = f.read()
        # verify wants ExecStart to exist: the built sluice stands in for
        # the installed one.
        unit, n = re.subn(r"^ExecStart=%s$" % re.escape(INSTALLED_SLUICE),
                          "ExecStart=" + os.path.abspath(st.SLUICE), text,
                          flags=re.MULTILINE)
        self.assertEqual(n, 1)
        path = os.path.join(self.tmp, "sluice.service")
        with open(path, "w") as f:
            f.write(unit)
        r = systemd_analyze("verify", "--man=no", path)
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))
        r = systemd_analyze("security", "--offline=yes", "--no-pager", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"Overall exposure level for "
                         r"sluice\.service: \d+\.\d+ OK\b")

    def test_unit_runs_sluice_with_its_settings_and_stops_it_gracefully(self):
        u = unit_settings()
        single = {k: v[-1] for k, v in u.items()}
        self.assertEqual(single["ExecStart"], INSTALLED_SLUICE)
        self.assertEqual(u["EnvironmentFile"], ["-/etc/sluice/sluice.env"])
        self.assertEqual(single["Restart"], "on-failure")
        self.assertEqual(single["KillSignal"], "SIGTERM")
        # SIGTERM to sluice alone: llama-server keeps serving the drain.
        self.assertEqual(single["KillMode"], "mixed")
        defaults = sluice_options()
        stopping = (seconds(defaults["SLUICE_DRAIN_TIMEOUT"]) +
                    seconds(defaults["SLUICE_STOP_TIMEOUT"]) + DRAIN_FLUSH_S)
        self.assertGreater(seconds(single["TimeoutStopSec"]), stopping)
        for key, value in (("DynamicUser", "yes"),
                           ("ProtectSystem", "strict"),
                           ("ProtectHome", "yes"),
                           ("NoNewPrivileges", "yes"),
                           ("PrivateTmp", "yes"),
                           ("CacheDirectory", "sluice")):
            self.assertEqual(single.get(key), value, key)
        # sluice's cache (demo model, provisioned llama-server) is the
        # one directory the sandbox lets it write.
        env = " ".join(u["Environment"]).split()
        self.assertIn("SLUICE_CACHE_DIR=%C/sluice", env)

    def test_env_file_lists_every_option_with_its_default(self):
        options = sluice_options()
        lines = env_file_lines()
        names = [name for name, _ in lines]
        self.assertEqual(sorted(names), sorted(options))
        # Where --help's default is a value, the file shows that value.
        # Others (none, computed ones) show an example.
        defaults = {name: value for name, value in lines
                    if re.fullmatch(r"[\w.:*/-]+", options[name])
                    and options[name] != "none"}
        for name, value in defaults.items():
            self.assertEqual(value, options[name], name)
        self.assertGreater(len(defaults), 30)
        # And sluice starts with all of them set.
        s = self.sluice("--model", st.MODEL_TINY, env=defaults)
        self.assertEqual(s.get("/health").status, 200)
        self.assertEqual(s.stop(), 0)


def manifests():
    """[(file name, object)] of every YAML file but the kustomization."""
    found = []
    for name in sorted(os.listdir(K8S)):
        if name.endswith((".yaml", ".yml")) and name != "kustomization.yaml":
            with open(os.path.join(K8S, name)) as f:
                found += [(name, doc) for doc in yaml.safe_load_all(f)
                          if doc is not None]
    return found


def find(kind, name):
    hits = [doc for _, doc in manifests()
            if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(hits) == 1, (kind, name, len(hits))
    return hits[0]


def container(workload):
    (c,) = workload["spec"]["template"]["spec"]["containers"]
    return c


def flag(args, name):
    """The values of --name=VALUE (or --name VALUE) in args."""
    values = []
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            values.append(a.split("=", 1)[1])
        elif a == name:
            values.append(args[i + 1])
    return values


def probes(c):
    return {kind: c[kind]["httpGet"] for kind in
            ("startupProbe", "livenessProbe", "readinessProbe") if kind in c}


class Kubernetes(st.TestCase):

    def test_every_object_parses_and_is_named(self):
        found = manifests()
        self.assertGreater(len(found), 0)
        for name, doc in found:
            with self.subTest(file=name, kind=doc.get("kind")):
                self.assertIsInstance(doc.get("apiVersion"), str)
                self.assertIsInstance(doc.get("kind"), str)
                self.assertRegex(doc["metadata"]["name"],
                                 r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        kinds = {doc["kind"] for _, doc in found}
        self.assertLessEqual({"StatefulSet", "Deployment", "Service",
                              "PersistentVolumeClaim", "PodDisruptionBudget",
                              "HorizontalPodAutoscaler"}, kinds)

    def test_kustomization_lists_every_manifest_and_only_those(self):
        with open(os.path.join(K8S, "kustomization.yaml")) as f:
            k = yaml.safe_load(f)
        self.assertEqual(k["kind"], "Kustomization")
        files = sorted(n for n in os.listdir(K8S)
                       if n.endswith((".yaml", ".yml"))
                       and n != "kustomization.yaml")
        self.assertEqual(sorted(k["resources"]), files)
        # The image it renames is the one sluice's Deployment names.
        self.assertEqual([i["name"] for i in k["images"]],
                         [container(find("Deployment", "sluice"))["image"]])

    def test_names_and_numbers_agree_across_objects(self):
        ls = find("StatefulSet", "llama-server")
        sl = find("Deployment", "sluice")
        hpa = find("HorizontalPodAutoscaler", "llama-server")
        ls_args, sl_args = container(ls)["args"], container(sl)["args"]
        # Every Service, the PDB and the workloads select their own pods.
        for kind, name in (("Service", "llama-server"), ("Service", "sluice"),
                           ("PodDisruptionBudget", "sluice")):
            obj = find(kind, name)
            selector = (obj["spec"]["selector"].get("matchLabels")
                        or obj["spec"]["selector"])
            owner = ls if name == "llama-server" else sl
            labels = owner["spec"]["template"]["metadata"]["labels"]
            self.assertLessEqual(selector.items(), labels.items(), kind)
        # The HPA scales the StatefulSet, and sluice follows its replicas
        # through the headless Service's name, whose answer lists the
        # ready ones (no fixed --upstream list).
        target = hpa["spec"]["scaleTargetRef"]
        self.assertEqual((target["kind"], target["name"]),
                         ("StatefulSet", "llama-server"))
        service = find("Service", ls["spec"]["serviceName"])
        self.assertEqual(service["spec"]["clusterIP"], "None")
        self.assertFalse(service["spec"].get("publishNotReadyAddresses"))
        port = service["spec"]["ports"][0]["port"]
        self.assertEqual(flag(sl_args, "--upstream-dns"),
                         ["%s:%d" % (service["metadata"]["name"], port)])
        self.assertEqual(flag(sl_args, "--upstream"), [])
        self.assertEqual(flag(ls_args, "--port"), [str(port)])
        # The sluice replicas share every llama-server's slots, with no
        # static split: each reads how busy it is from its /metrics.
        slots = int(flag(ls_args, "-np")[0])
        self.assertEqual(flag(sl_args, "--slots-per-upstream"), [])
        self.assertIn("--metrics", ls_args)
        # An HTTP thread for every connection the sluices may hold (all
        # its slots, plus 2 and the occupancy poll each) and for the
        # probes.
        self.assertGreaterEqual(int(flag(ls_args, "--threads-http")[0]),
                                sl["spec"]["replicas"] * (slots + 3)
                                + PROBE_CONNECTIONS)
        # Both sides read the upstream key from the same Secret.
        refs = {c["name"]: {e["name"]: e["valueFrom"]["secretKeyRef"]
                            for e in c.get("env", []) if "valueFrom" in e}
                for c in (container(ls), container(sl))}
        self.assertEqual(refs["llama-server"]["LLAMA_API_KEY"],
                         refs["sluice"]["SLUICE_UPSTREAM_API_KEY"])
        # Every object carries a resource request.
        for w in (ls, sl):
            self.assertIn("requests", container(w)["resources"])
        self.assertGreaterEqual(sl["spec"]["replicas"],
                                find("PodDisruptionBudget", "sluice")
                                ["spec"]["minAvailable"] + 1)

    def test_grace_period_outlasts_the_drain(self):
        sl = find("Deployment", "sluice")
        drain = flag(container(sl)["args"], "--drain-timeout") or [
            sluice_options()["SLUICE_DRAIN_TIMEOUT"]]
        # The preStop hook's sleep comes out of the same grace period.
        hook = container(sl).get("lifecycle", {}).get("preStop", {})
        command = hook.get("exec", {}).get("command", [])
        pre_stop = (float(command[1]) if command[:1] == ["sleep"]
                    else 0.0)
        self.assertGreater(sl["spec"]["template"]["spec"]
                           ["terminationGracePeriodSeconds"],
                           pre_stop + seconds(drain[-1]) + DRAIN_FLUSH_S)

    def test_probes_and_metric_answer_from_the_real_programs(self):
        """llama-server and sluice started here with the manifests' own
        arguments (only addresses and the model file changed); each probe
        the manifests name is requested from them."""
        ls_c = container(find("StatefulSet", "llama-server"))
        sl_c = container(find("Deployment", "sluice"))
        hpa = find("HorizontalPodAutoscaler", "llama-server")

        port = st.free_port()
        args = list(ls_c["args"])
        args[args.index("-m") + 1] = st.MODEL_TINY
        args[args.index("--host") + 1] = "127.0.0.1"
        args[args.index("--port") + 1] = str(port)
        env = dict(os.environ, LLAMA_API_KEY=UPSTREAM_KEY,
                   LLAMA_ARG_UI="0", LLAMA_ARG_NO_WEBUI="1")
        ls = st.Process([st.llama_server_path(), *args], env=env,
                        name="llama-server")
        self._processes.append(ls)
        paths = {p["path"] for p in probes(ls_c).values()}
        self.assertEqual(paths, {"/health"})
        st.wait_until(lambda: all(self.status(port, p) == 200
                                  for p in paths), 60,
                      "llama-server's probes to answer 200")

        # sluice with the manifest's arguments: the Service's name, asked
        # of a DNS server of the test's own, answers with the llama-server
        # above (the name is the manifest's, the port this one's).
        (name,) = flag(sl_c["args"], "--upstream-dns")
        dns = DnsServer()
        self.addCleanup(dns.stop)
        dns.set(name.rsplit(":", 1)[0], ["127.0.0.1"])
        args = [a for a in sl_c["args"]
                if not a.startswith(("--listen", "--upstream-dns"))]
        args += ["--upstream-dns=%s:%d" % (name.rsplit(":", 1)[0], port),
                 "--dns-server=" + dns.address]
        s = self.sluice(*args, env={"SLUICE_UPSTREAM_API_KEY": UPSTREAM_KEY})
        for kind, probe in probes(sl_c).items():
            with self.subTest(probe=kind):
                self.assertEqual(self.status(s.port, probe["path"]), 200)
        health = s.health().json()["upstreams"]
        self.assertEqual([(u["url"], u["state"]) for u in health],
                         [("http://127.0.0.1:%d" % port, "ready")])
        self.assertEqual(health[0]["slots"], int(flag(ls_c["args"], "-np")[0]))
        # The HPA's metric is one sluice exports.
        (metric,) = [m["external"]["metric"]["name"]
                     for m in hpa["spec"]["metrics"]]
        exposition = s.get("/metrics").body.decode()
        self.assertRegex(exposition, r"(?m)^# TYPE %s gauge$"
                         % re.escape(metric))
        self.assertEqual(s.stop(), 0)

    @staticmethod
    def status(port, path):
        try:
            return st.request(port, "GET", path, timeout=5).status
        except OSError:
            return None


class Monitoring(st.TestCase):
    """deploy/docker-compose.monitoring.yml, added to the compose file with
    a second -f: compose resolves its paths from deploy/ as the first
    file's."""

    def test_override_adds_pinned_services_whose_files_exist(self):
        with open(COMPOSE) as f:
            base = yaml.safe_load(f)
        with open(MONITORING) as f:
            override = yaml.safe_load(f)
        services = override["services"]
        self.assertEqual(sorted(services), ["grafana", "prometheus"])
        # It adds services and changes none of the main file's.
        self.assertFalse(set(services) & set(base["services"]))
        known = set(services) | set(base["services"])
        for name, service in services.items():
            with self.subTest(service=name):
                # Pinned by a version tag, never latest.
                image, tag = service["image"].rsplit(":", 1)
                self.assertIn(image, ("grafana/grafana", "prom/prometheus"))
                self.assertRegex(tag, r"^v?\d+\.\d+\.\d+$")
                self.assertLessEqual(set(service.get("depends_on", [])),
                                     known)
                # Published on loopback unless the user says otherwise.
                for port in service["ports"]:
                    self.assertRegex(port, r"^\$\{\w+:-127\.0\.0\.1:\d+\}"
                                     r":\d+$")
                for volume in service["volumes"]:
                    source = volume.split(":")[0]
                    if source.startswith("."):
                        self.assertTrue(os.path.exists(os.path.join(
                            ROOT, "deploy", source)), volume)
                    else:
                        self.assertIn(source, override["volumes"])


if __name__ == "__main__":
    st.main()
