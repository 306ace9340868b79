"""The sluice command line: help, version, bad values, one-shot actions,
the configuration file (--config, --check-config) and its example,
deploy/sluice.yaml."""

import http.client
import json
import os
import re
import socket
import subprocess

import yaml

import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240


def run(*args, env=None, timeout=SAFETY_NET_S):
    # The tests' llama-server stays: --check-config looks for one as a
    # start does, for a managed model (the demo model too).
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("SLUICE_") or k == "SLUICE_LLAMA_SERVER"}
    full.update(env or {})
    return subprocess.run([st.SLUICE, *args], capture_output=True, text=True,
                          env=full, timeout=timeout)


class Cli(st.TestCase):

    def test_help_lists_every_option_with_its_variable_and_default(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stderr, "")
        flags = [line.split()[0] for line in r.stdout.splitlines()
                 if line.startswith("  --")]
        self.assertIn("--listen", flags)
        # Each option (not action) is followed by its [VARIABLE; default: ...].
        text = r.stdout
        for flag in flags:
            if flag in ("--help", "--version", "--write-demo-model",
                        "--probe", "--check-config", "--hash-key"):
                continue
            var = "SLUICE_" + flag[2:].upper().replace("-", "_")
            # OpenTelemetry's own variables are the --otel-* twins.
            if flag.startswith("--otel-"):
                var = var[len("SLUICE_"):]
            if flag == "--llama-arg":
                var = "SLUICE_LLAMA_ARGS"
            self.assertRegex(text, r"\[%s; default: [^\]]+\]" % var,
                             "%s has no environment twin or default" % flag)

    def test_config_help_says_what_sighup_reads_again(self):
        text = re.sub(r"\n {6}", " ", run("--help").stdout)
        (config_help,) = re.findall(r"^  --config FILE (.*)$", text,
                                    re.MULTILINE)
        self.assertNotIn("read once", config_help)
        self.assertIn("again on SIGHUP for its keys: and models: sections, "
                      "default-model and max-loaded", config_help)

    def test_version(self):
        r = run("--version")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^sluice \d+\.\d+\.\d+ \(libuv ")

    def test_bad_values_exit_2_with_one_line_naming_the_option(self):
        cases = [
            (["--slots", "0"], {}, "--slots"),
            (["--listen", "nowhere"], {}, "--listen"),
            (["--upstream", "ftp://x"], {}, "--upstream"),
            (["--startup-timeout", "later"], {}, "--startup-timeout"),
            (["--bogus"], {}, "--bogus"),
            ([], {"SLUICE_CTX_SIZE": "tiny"}, "SLUICE_CTX_SIZE"),
            ([], {"SLUICE_LOG_LEVEL": "chatty"}, "SLUICE_LOG_LEVEL"),
            (["--api-key", "k1,,k2"], {}, "--api-key"),
            ([], {"SLUICE_ADMIN_KEY": "has space"}, "SLUICE_ADMIN_KEY"),
            (["--api-key-file", "/nonexistent/keys"], {},
             "--api-key-file /nonexistent/keys: cannot read it"),
            ([], {"SLUICE_API_KEY_FILE": "/nonexistent/keys"},
             "SLUICE_API_KEY_FILE /nonexistent/keys: cannot read it"),
            (["--cors-origin", "https://app.example/"], {}, "--cors-origin"),
            ([], {"SLUICE_CORS_ORIGIN": "*,http://a"}, "--cors-origin"),
            (["--trusted-proxy", "10.0.0.0/33"], {}, "--trusted-proxy"),
            (["--trusted-proxy", "127.0.0.1,proxy.example"], {},
             "--trusted-proxy: expected an IP address or a CIDR range such "
             "as 10.0.0.0/8 or fd00::/8, got \"proxy.example\""),
            ([], {"SLUICE_TRUSTED_PROXY": "::1, fd00::/8/8"},
             "SLUICE_TRUSTED_PROXY"),
            # Issue 41: a body limit that refuses every body, and a poll
            # of an upstream's occupancy every millisecond.
            (["--max-body", "0"], {},
             "--max-body: expected a size from 1024 to 1073741824 bytes"),
            (["--occupancy-poll", "1ms"], {},
             "--occupancy-poll: 1ms is below the floor of 100ms (0 turns "
             "polling off)"),
            ([], {"SLUICE_OCCUPANCY_POLL": "99ms"},
             "SLUICE_OCCUPANCY_POLL: 99ms is below the floor of 100ms"),
        ]
        for args, env, name in cases:
            with self.subTest(args=args, env=env):
                r = run(*args, env=env)
                self.assertEqual(r.returncode, 2)
                self.assertEqual(r.stdout, "")
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertTrue(lines[0].startswith("sluice: %s" % name),
                                lines[0])

    def test_a_key_file_without_keys_is_one_clear_error(self):
        path = os.path.join(self.tmp, "keys")
        with open(path, "w") as f:
            f.write("# keys go here, one per line\n\n")
        r = run("--api-key-file", path)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(
            r.stderr,
            "sluice: --api-key-file %s: no key in it (one key per line; "
            "blank lines and lines starting with # are skipped)\n" % path)

    def test_keys_never_show_in_help_or_errors(self):
        secret = "s3cr3t-key-value"
        r = run("--help", env={"SLUICE_API_KEY": secret,
                               "SLUICE_ADMIN_KEY": secret})
        self.assertEqual(r.returncode, 0)
        self.assertNotIn(secret, r.stdout)
        self.assertIn("[SLUICE_API_KEY; default: none: no key needed]",
                      r.stdout)
        # A refused key is described, never repeated.
        for args in (["--api-key", secret + " x"],
                     ["--admin-key", secret + "\x01"],
                     ["--api-key", secret * 20]):
            with self.subTest(args=args[0]):
                r = run(*args)
                self.assertEqual(r.returncode, 2)
                self.assertNotIn(secret, r.stderr)
                self.assertTrue(r.stderr.startswith("sluice: %s: " % args[0]),
                                r.stderr)

    def test_write_demo_model(self):
        for size in ("tiny", "slow"):
            path = os.path.join(self.tmp, size + ".gguf")
            r = run("--write-demo-model", path, "--demo-model-size", size)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(path, "rb") as f:
                self.assertEqual(f.read(4), b"GGUF")
            # no temporary file left behind beside the model
            self.assertNotIn(".tmp.", " ".join(os.listdir(self.tmp)))
        tiny = os.path.getsize(os.path.join(self.tmp, "tiny.gguf"))
        slow = os.path.getsize(os.path.join(self.tmp, "slow.gguf"))
        self.assertLess(tiny, 1 << 20)
        self.assertGreater(slow, 10 << 20)

    def test_write_demo_model_into_a_missing_directory(self):
        r = run("--write-demo-model", "/nonexistent/dir/m.gguf")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip(),
                         "sluice: --write-demo-model /nonexistent/dir/m.gguf: "
                         "no such file or directory")


class Probe(st.TestCase):
    """sluice --probe URL: a container's health check without curl."""

    def test_2xx_exits_0_silently(self):
        up = self.recording_upstream()
        sl = self.sluice("--upstream", up.url)
        for path in ("/health", "/ready"):
            with self.subTest(path=path):
                r = run("--probe", "http://127.0.0.1:%d%s" % (sl.port, path))
                self.assertEqual((r.returncode, r.stdout, r.stderr),
                                 (0, "", ""))

    def test_another_status_exits_1_naming_it(self):
        up = self.recording_upstream()
        sl = self.sluice("--upstream", up.url)
        url = "http://127.0.0.1:%d/no/such/path" % sl.port
        r = run("--probe", url)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, "sluice: --probe %s: answered HTTP 404, "
                         "not 2xx\n" % url)

    def test_a_closed_port_exits_1_naming_the_connection_error(self):
        # Bound and not listening: connecting to it is refused for certain.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = "http://127.0.0.1:%d/health" % s.getsockname()[1]
            r = run("--probe", url)
        self.assertEqual(r.returncode, 1)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("sluice: --probe %s: no answer: "
                                            % url), lines[0])
        self.assertIn("Couldn't connect to server", lines[0])

    def test_a_server_that_never_answers_is_given_up_on(self):
        # Listening, never accepting: the connection completes in the
        # kernel's backlog and no answer ever comes.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            url = "http://127.0.0.1:%d/health" % s.getsockname()[1]
            r = run("--probe", url)
        self.assertEqual(r.returncode, 1)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertRegex(lines[0], r"^sluice: --probe %s: no answer: "
                         r"Operation timed out after \d+ milliseconds"
                         % url.replace(".", r"\."))


class AddressInUse(st.TestCase):
    """A start on an address another program listens on: one error that
    names the option the port came from and how to pick another."""

    def test_the_error_names_the_port_option(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            port = taken.getsockname()[1]
            addr = "127.0.0.1:%d" % port
            in_use = ("address already in use: another program listens "
                      "there; stop it, or pick another port")
            cases = [
                (("--port", str(port)), {},
                 "--port %d (%s): %s" % (port, addr, in_use)),
                ((), {"SLUICE_PORT": str(port)},
                 "--port %d (%s): %s" % (port, addr, in_use)),
                (("--listen", addr), {},
                 "--listen %s: %s with --port N" % (addr, in_use)),
            ]
            for args, env, line in cases:
                with self.subTest(args=args, env=env):
                    r = run("--upstream", "http://127.0.0.1:1", *args,
                            env=env)
                    self.assertEqual(r.returncode, 1, r.stderr)
                    self.assertRegex(r.stderr.splitlines()[-1],
                                     r"^\S+ error %s$" % re.escape(line))


class ExposureWarning(st.TestCase):
    """A warning at start when sluice listens beyond loopback and no client
    key is set."""

    WARNING = (r"warn  listening on http://0\.0\.0\.0:%d, which other hosts "
               r"can reach, and no client key is set: anyone who can connect "
               r"may use this gateway; set --api-key \(or --api-key-file\), "
               r"or listen on loopback only with --listen 127\.0\.0\.1:%d$")
    ANY_WARNING = r"which other hosts can reach"

    def started(self, *args, env=None):
        up = self.recording_upstream()
        # Not polled for readiness, which takes 127.0.0.1: the upstream's
        # readiness is logged after the warning's place, so once that line
        # is in, every start-up line is.
        s = self.sluice("--upstream", up.url, *args, env=env,
                        wait_ready=False)
        s.wait_line(r"info  sluice \S+ is ready on ", timeout=SAFETY_NET_S)
        return s

    def test_all_interfaces_without_a_key_warn_once(self):
        for listen in ("0.0.0.0:0", ":0"):
            with self.subTest(listen=listen):
                s = self.started("--listen", listen)
                s.wait_line(self.WARNING % (s.port, s.port))
                self.assertEqual(s.count_lines(self.ANY_WARNING), 1)

    def test_a_key_or_loopback_is_quiet(self):
        path = os.path.join(self.tmp, "keys")
        with open(path, "w") as f:
            f.write("file-key\n")
        cases = [
            (("--listen", "0.0.0.0:0", "--api-key", "k1"), None),
            (("--listen", "0.0.0.0:0", "--api-key-file", path), None),
            (("--listen", "0.0.0.0:0"), {"SLUICE_API_KEY": "k2"}),
            # The test helper's own --listen 127.0.0.1:0, and another
            # loopback address.
            ((), None),
            (("--listen", "127.0.0.9:0"), None),
        ]
        for args, env in cases:
            with self.subTest(args=args, env=env):
                s = self.started(*args, env=env)
                self.assertEqual(s.count_lines(self.ANY_WARNING), 0,
                                 s.output())

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "deploy", "sluice.yaml")

# The lines of --check-config: "name: value  # source", or, for an option
# with no value until set (--port), "# name: not set (what stands for it)".
CHECK_LINE = re.compile(r"^([a-z-]+): (.*)  # (default|file|env|flag)$")
UNSET_LINE = re.compile(r"^# ([a-z-]+): not set \((.*)\)$")


def help_options():
    """[(name, default)] of every option --help lists, in its order."""
    text = run("--help").stdout.split("\nActions:")[0]
    text = re.sub(r"\n {6}", " ", text)
    return re.findall(r"^  --([a-z-]+) \S+ .*?\[(?:SLUICE|OTEL)_\w+; default: "
                      r"([^\]]*)\]", text, re.MULTILINE)


def check_config(path, *args, env=None):
    """Runs --check-config; returns (result, {name: (value, source)})."""
    r = run("--check-config", path, *args, env=env)
    found = {}
    for line in r.stdout.splitlines():
        m = UNSET_LINE.match(line)
        if m:
            found[m.group(1)] = (None, "default")
            continue
        m = CHECK_LINE.match(line)
        assert m, "not a name: value  # source line: %r" % line
        found[m.group(1)] = (m.group(2), m.group(3))
    return r, found


class ConfigFile(st.TestCase):
    """--config and --check-config, through the real executable."""

    def write(self, text, name="sluice.yaml"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def started(self, *args, env=None, host="127.0.0.1"):
        """A sluice whose --listen may come from its file (the helper's
        Sluice always passes one): started as a bare process."""
        full = {k: v for k, v in os.environ.items()
                if not k.startswith("SLUICE_")}
        full.update(env or {})
        p = st.Process([st.SLUICE, "--llama-server", st.llama_server_path(),
                        *args], env=full, name="sluice")
        self._processes.append(p)
        m = p.wait_line(r"listening on http://%s:(\d+)" % re.escape(host),
                        SAFETY_NET_S)
        p.host, p.port = host, int(m.group(1))
        p.wait_line(r"info  sluice \S+ is ready on ", SAFETY_NET_S)
        return p

    @staticmethod
    def get(p, path, key=None):
        conn = http.client.HTTPConnection(p.host, p.port,
                                          timeout=SAFETY_NET_S)
        try:
            conn.request("GET", path, headers=(
                {"Authorization": "Bearer " + key} if key else {}))
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def test_a_file_configures_a_real_sluice_and_flag_and_env_override_it(self):
        path = self.write("# a sluice of two slots, keyed\n"
                          "listen: 127.0.0.9:0\n"
                          "model: %s\n"
                          "slots: 2\n"
                          "api-key:\n"
                          "  - file-key\n" % json.dumps(st.MODEL_TINY))
        s = self.started("--config", path, host="127.0.0.9")
        self.assertEqual(self.get(s, "/props")[0], 401)
        status, body = self.get(s, "/props", "file-key")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["total_slots"], 2)
        s.kill()

        # SLUICE_CONFIG names the file; the environment's key replaces the
        # file's list; flags win over both.
        s = self.started("--listen", "127.0.0.1:0", "--slots", "3",
                         env={"SLUICE_CONFIG": path,
                              "SLUICE_API_KEY": "env-key"})
        self.assertEqual(self.get(s, "/props", "file-key")[0], 401)
        status, body = self.get(s, "/props", "env-key")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["total_slots"], 3)

    def test_port_replaces_the_port_of_listen_wherever_each_is_set(self):
        up = self.recording_upstream()
        path = self.write("listen: 127.0.0.9:0\nupstream: %s\n" % up.url)
        port = st.free_port()
        # The file's address, the flag's port.
        s = self.started("--config", path, "--port", str(port),
                         host="127.0.0.9")
        self.assertEqual(s.port, port)
        self.assertEqual(self.get(s, "/health")[0], 200)
        s.kill()
        # Alone (here from the environment), on the default address.
        s = self.started("--upstream", up.url, env={"SLUICE_PORT": str(port)})
        self.assertEqual((s.host, s.port), ("127.0.0.1", port))
        self.assertEqual(self.get(s, "/health")[0], 200)
        r, found = check_config(path, "--port", str(port))
        self.assertEqual(found["listen"], ("127.0.0.9:%d" % port, "file"))
        self.assertEqual(found["port"], (str(port), "flag"))

    def test_check_config_prints_every_option_with_its_source(self):
        path = self.write("listen: 127.0.0.1:9\n"
                          "batch-window: 50ms\n"
                          "keepalive-timeout: 1500ms\n"
                          "upstream: http://127.0.0.1:1\n"
                          "max-queue: 5\n"
                          "cors-origin: [\"https://a.example\", "
                          "\"https://b.example:8443\"]\n")
        r, found = check_config(path, "--max-queue", "6",
                                env={"SLUICE_BATCH_WINDOW": "auto",
                                     "SLUICE_SLOTS": "7",
                                     "OTEL_EXPORTER_OTLP_HEADERS":
                                         "Authorization=Bearer%20s3cr3t"})
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        # Every option, once, in --help's order.
        self.assertEqual(list(found), [n for n, _ in help_options()])
        self.assertEqual(found["config"], (path, "flag"))
        self.assertEqual(found["listen"], ("127.0.0.1:9", "file"))
        self.assertEqual(found["upstream"], ("[http://127.0.0.1:1]", "file"))
        self.assertEqual(found["batch-window"], ("auto", "env"))
        self.assertEqual(found["slots"], ("7", "env"))
        self.assertEqual(found["max-queue"], ("6", "flag"))
        self.assertEqual(found["cors-origin"],
                         ("[https://a.example, https://b.example:8443]",
                          "file"))
        self.assertEqual(found["max-body"], ("1M", "default"))
        self.assertEqual(found["port"], (None, "default"))
        self.assertEqual(found["keepalive-timeout"], ("1.5", "file"))
        # A collector's token is a secret too.
        self.assertEqual(found["otel-exporter-otlp-headers"],
                         ('"********"', "env"))
        self.assertNotIn("s3cr3t", r.stdout)
        # The output is YAML that says the same.
        loaded = yaml.load(r.stdout, Loader=yaml.BaseLoader)
        self.assertEqual(loaded["cors-origin"],
                         ["https://a.example", "https://b.example:8443"])
        self.assertEqual(loaded["max-queue"], "6")

    def test_check_config_prints_every_duration_in_seconds(self):
        # --help's defaults mix seconds ("120") and milliseconds
        # ("200ms"), as a user may write them; --check-config says them
        # all in one unit, seconds, which a bare number means.
        text = run("--help").stdout.split("\nActions:")[0]
        durations = re.findall(r"^  --([a-z-]+) DURATION$", text,
                               re.MULTILINE)
        defaults = dict(help_options())
        self.assertIn("occupancy-poll", durations)
        _, found = check_config(self.write(""))
        for name in durations:
            with self.subTest(name=name):
                value, source = found[name]
                self.assertEqual(source, "default")
                self.assertRegex(value, r"^\d+(\.\d{1,3})?$")
                given = defaults[name]
                ms = (float(given[:-2]) if given.endswith("ms")
                      else float(given) * 1000)
                self.assertEqual(round(float(value) * 1000), round(ms))
        self.assertEqual(found["occupancy-poll"][0], "0.2")
        self.assertEqual(found["stream-coalesce"][0], "0.001")

    def test_check_config_masks_every_secret(self):
        keys = self.write("file-client-key\n", name="keys")
        path = self.write("api-key: [yaml-client-key]\n"
                          "admin-key: yaml-admin-key\n"
                          "api-key-file: %s\n" % keys)
        r, found = check_config(
            path, "--api-key", "flag-client-key",
            env={"SLUICE_UPSTREAM_API_KEY": "env-upstream-key"})
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        for secret in ("file-client-key", "yaml-client-key",
                       "flag-client-key", "yaml-admin-key",
                       "env-upstream-key"):
            self.assertNotIn(secret, r.stdout)
        # The flag's key and the key file's, each masked.
        self.assertEqual(found["api-key"],
                         ('["********", "********"]', "flag"))
        self.assertEqual(found["admin-key"], ('"********"', "file"))
        self.assertEqual(found["upstream-api-key"], ('"********"', "env"))
        _, found = check_config(self.write("slots: 2\n", name="plain.yaml"))
        self.assertEqual(found["admin-key"], ('""', "default"))
        self.assertEqual(found["api-key"], ("[]", "default"))

    def test_a_bad_file_exits_2_naming_file_line_and_option(self):
        cases = [
            ("slots: 4\nbogus: 1\n", ":2: bogus: unknown option"),
            ("slots: 4\nctx-size: 10\n",
             ":2: ctx-size: expected a whole number from 64 to 16777216, "
             "got \"10\""),
            ("upstream:\n  - http://a:1\n  - ftp://b\n",
             ":3: upstream: expected an http:// or https:// URL"),
            ("slots: [1, 2]\n", ":1: slots: takes one value, not a list"),
            ("listen:\n  host: 127.0.0.1\n",
             ":2: listen: takes a value, not a mapping"),
            ("slots: 2\nmax-queue: 3\nslots: 2\n",
             ":3: slots: given twice (first on line 1)"),
            ("slots: 2\nlisten: \"127.0.0.1:8080\n",
             ":3: not valid YAML: found unexpected end of stream (while "
             "scanning a quoted scalar started on line 2)"),
            # A list left open is a syntax error, not a list, and says
            # where it opened; so is a second key after it.
            ("listen: [127.0.0.1:1\n",
             ":2: not valid YAML: did not find expected ',' or ']' (while "
             "parsing a flow sequence started on line 1)"),
            ("listen: [127.0.0.1:1\nslots: 2\n",
             ":2: not valid YAML: did not find expected ',' or ']'"),
            ("help: yes\n", ":1: help: a one-shot flag"),
            ("config: other.yaml\n", ":1: config: a one-shot flag"),
            ("admin-key: \"two words\"\n", ":1: admin-key: a key holds a "
             "space"),
            ("max-body: 0\n", ":1: max-body: expected a size from 1024 "),
            ("slots: 2\noccupancy-poll: 1ms\n", ":2: occupancy-poll: 1ms is "
             "below the floor of 100ms (0 turns polling off)\n"),
        ]
        for text, error in cases:
            with self.subTest(text=text):
                path = self.write(text)
                for how in (("--check-config", path), ("--config", path)):
                    r = run(*how)
                    self.assertEqual((r.returncode, r.stdout), (2, ""))
                    self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
                    self.assertTrue(r.stderr.startswith(
                        "sluice: " + path + error), r.stderr)
                    self.assertNotIn("two words", r.stderr)
        # A file that cannot be read, or is too large, is named with the
        # flag or variable that named it.
        r = run("--check-config", "/nonexistent/sluice.yaml")
        self.assertEqual((r.returncode, r.stderr),
                         (2, "sluice: --check-config /nonexistent/"
                          "sluice.yaml: cannot read it: No such file or "
                          "directory\n"))
        r = run("--slots", "2", env={"SLUICE_CONFIG": "/nonexistent/x"})
        self.assertEqual((r.returncode, r.stderr),
                         (2, "sluice: SLUICE_CONFIG /nonexistent/x: cannot "
                          "read it: No such file or directory\n"))
        # Nor is a path that is not a regular file, at once: a FIFO's
        # open would wait for a writer (issue 41, item 5).
        fifo = os.path.join(self.tmp, "fifo.yaml")
        os.mkfifo(fifo)
        for how, flag, kind in (
                (("--check-config", fifo), "--check-config", "a FIFO"),
                (("--config", fifo), "--config", "a FIFO"),
                (("--config", self.tmp), "--config", "a directory"),
                (("--api-key-file", fifo), "--api-key-file", "a FIFO")):
            with self.subTest(how=how):
                r = run(*how, timeout=30)
                self.assertEqual(
                    (r.returncode, r.stderr),
                    (2, "sluice: %s %s: cannot read it: not a regular "
                     "file (%s)\n" % (flag, how[1], kind)))
        big = self.write("#" * (16 << 20) + "\n", name="big.yaml")
        r = run("--config", big)
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"^sluice: --config %s: over \d+ bytes: "
                         r"not a configuration file\n$" % re.escape(big))



class CheckConfigAsAStart(st.TestCase):
    """--check-config refuses what a start refuses before running anything
    (issue 28): the same line, exit 2 there and 1 at start."""

    def write(self, text, name="sluice.yaml"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def assert_refused_alike(self, path, error, *args, env=None):
        """--check-config path, and a start with --config path, both refuse
        with `error` (a regular expression for the whole line)."""
        r = run("--check-config", path, *args, env=env)
        self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
        self.assertRegex(r.stderr, r"^sluice: %s\n$" % error)
        started = run("--config", path, "--listen", "127.0.0.1:0", *args,
                      env=env)
        self.assertEqual(started.returncode, 1, started.stderr)
        self.assertRegex(started.stderr, r"(?m) error %s$" % error)
        # Nothing was started before the refusal.
        self.assertNotIn("listening on", started.stderr)

    def models(self, n, text):
        return "models:\n" + "".join("  m%d:\n%s" % (i, text)
                                     for i in range(n))

    def test_the_upstreams_a_start_adds_are_bounded_alike(self):
        too_many = (r"65 upstreams to start with \(each URL of --upstream or "
                    r"of a model's upstreams:, and each replica of a managed "
                    r"model that starts at once\): sluice holds at most 64")
        urls = ["http://127.0.0.1:%d" % (1000 + i) for i in range(65)]
        path = self.write("upstream:\n" +
                          "".join("  - %s\n" % u for u in urls[:64]))
        self.assertEqual(run("--check-config", path).returncode, 0)
        path = self.write("upstream:\n" +
                          "".join("  - %s\n" % u for u in urls))
        self.assert_refused_alike(path, too_many)
        # 64 and a managed llama-server: 65 as well.
        path = self.write("upstream:\n" +
                          "".join("  - %s\n" % u for u in urls[:64]) +
                          "model: %s\n" % st.MODEL_TINY)
        self.assert_refused_alike(path, too_many, "--llama-server",
                                  st.llama_server_path())
        # Models' upstreams: add up across the models.
        upstreams = "    upstreams:\n" + "".join(
            "      - http://127.0.0.1:%d\n" % (1000 + i) for i in range(32))
        path = self.write(self.models(2, upstreams))
        self.assertEqual(run("--check-config", path).returncode, 0)
        path = self.write(self.models(2, upstreams) +
                          "  last:\n    upstreams: [http://127.0.0.1:9]\n")
        self.assert_refused_alike(path, too_many)

    def test_replicas_count_when_their_model_starts_with_sluice(self):
        managed = "    model: %s\n    replicas: 13\n" % st.MODEL_TINY
        exe = ("--llama-server", st.llama_server_path())
        five = self.models(5, managed)  # 65 replicas
        self.assert_refused_alike(
            self.write(five), r"65 upstreams to start with .*", *exe)
        # Only those that start at once count: four within --max-loaded
        # or --memory-budget, or four and one waiting for a request.
        four_fit = os.path.getsize(st.MODEL_TINY) * 13 * 4
        lazy = self.models(4, managed) + (
            "  lazy:\n%s    preload: false\n" % managed)
        for text in ("max-loaded: 4\n" + five,
                     "memory-budget: %d\n" % four_fit + five, lazy):
            with self.subTest(text=text):
                r = run("--check-config", self.write(text), *exe)
                self.assertEqual((r.returncode, r.stderr), (0, ""))

    def test_llama_server_and_model_files_are_checked_alike(self):
        bad = self.write("this is not a model\n" * 10, name="bad.gguf")
        big = os.path.getsize(st.MODEL_TINY)
        # A FIFO is refused before it is opened for good (a reload checks a
        # new model's file on the loop: issue 41, item 5).
        fifo = os.path.join(self.tmp, "fifo.gguf")
        os.mkfifo(fifo)
        cases = [
            ("model: %s\n" % fifo, ("--llama-server", st.llama_server_path()),
             r"--model %s: not a regular file \(a FIFO\)" % re.escape(fifo)),
            ("model: %s\n" % st.MODEL_TINY,
             ("--llama-server", "/nonexistent/llama-server"),
             r"--llama-server /nonexistent/llama-server: no such file"),
            ("model: %s\n" % bad, ("--llama-server", st.llama_server_path()),
             r"--model %s: not a GGUF model file \(it does not start with "
             r"\"GGUF\"\)" % re.escape(bad)),
            ("model: /nonexistent/m.gguf\n",
             ("--llama-server", st.llama_server_path()),
             r"--model /nonexistent/m.gguf: No such file or directory"),
            (self.models(1, "    model: %s\n" % bad),
             ("--llama-server", st.llama_server_path()),
             r"models.m0: --model %s: not a GGUF model file .*"
             % re.escape(bad)),
            ("memory-budget: %d\n" % (2 * big - 1) +
             self.models(1, "    model: %s\n    replicas: 2\n"
                         % st.MODEL_TINY),
             ("--llama-server", st.llama_server_path()),
             r"models.m0: %d bytes of model files \(with its replicas\) is "
             r"more than --memory-budget %d: it could never run"
             % (2 * big, 2 * big - 1)),
            (self.models(1, "    hf-repo: org/repo\n"),
             ("--llama-server", "/nonexistent/llama-server"),
             r"models.m0: --llama-server /nonexistent/llama-server: no such "
             r"file"),
        ]
        for text, args, error in cases:
            with self.subTest(text=text, args=args):
                self.assert_refused_alike(self.write(text), error, *args)

    def test_a_start_without_a_cache_directory_is_refused_alike(self):
        env = {k: v for k, v in os.environ.items()
               if k not in ("HOME", "XDG_CACHE_HOME")}
        path = self.write("upstream: http://127.0.0.1:9\n")
        r = subprocess.run([st.SLUICE, "--check-config", path],
                           capture_output=True, text=True, env=env,
                           timeout=SAFETY_NET_S)
        self.assertEqual((r.returncode, r.stderr),
                         (2, "sluice: no cache directory: set --cache-dir, "
                          "XDG_CACHE_HOME or HOME\n"))
        r = subprocess.run([st.SLUICE, "--check-config", path,
                            "--cache-dir", self.tmp],
                           capture_output=True, text=True, env=env,
                           timeout=SAFETY_NET_S)
        self.assertEqual(r.returncode, 0, r.stderr)

class ExampleFile(st.TestCase):
    """deploy/sluice.yaml says what --help says, and works."""

    def example_lines(self):
        with open(EXAMPLE) as f:
            return f.read().splitlines()

    def test_every_option_is_there_with_its_default(self):
        lines = self.example_lines()
        settings = [(i, line) for i, line in enumerate(lines)
                    if re.match(r"^#[a-z-]+: ", line)]
        names = [line[1:].split(":")[0] for _, line in settings]
        options = help_options()
        # Each option once, in --help's order; --config names the file and
        # cannot be in it, so the file says so instead.
        self.assertEqual(names, [n for n, _ in options if n != "config"])
        self.assertIn("--config itself cannot", " ".join(lines))
        defaults = dict(options)
        for i, line in settings:
            name, value = line[1:].split(": ", 1)
            # The comment above says what --help says: its default...
            start = i
            while start > 0 and lines[start - 1].startswith("# "):
                start -= 1
            comment = " ".join(l[2:] for l in lines[start:i])
            with self.subTest(name=name):
                self.assertIn("default: " + defaults[name], comment)
                # ...and where --help's default is a value, the setting
                # shows it.
                if (re.fullmatch(r"[\w.:*/-]+", defaults[name])
                        and defaults[name] != "none"):
                    self.assertEqual(
                        yaml.load(name + ": " + value,
                                  Loader=yaml.BaseLoader)[name],
                        defaults[name])

    def test_uncommented_it_passes_check_config(self):
        lines = self.example_lines()
        defaults = dict(help_options())
        # Two settings changed from their defaults...
        text = "\n".join(lines).replace("\n#slots: 4\n", "\nslots: 8\n")
        text = text.replace("\n#batch-window: auto\n",
                            "\nbatch-window: 50ms\n")
        path = os.path.join(self.tmp, "two.yaml")
        with open(path, "w") as f:
            f.write(text)
        r, found = check_config(path)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(found["slots"], ("8", "file"))
        self.assertEqual(found["batch-window"], ("0.05", "file"))
        self.assertEqual(found["max-queue"], ("1024", "default"))
        # ...and every setting that shows its default, all at once: the
        # same configuration as none, each value now from the file.
        text = "\n".join(
            line[1:] if re.match(r"^#([a-z-]+): ", line) and
            defaults[line[1:].split(":")[0]] not in ("none", "") and
            re.fullmatch(r"[\w.:*/-]+",
                         defaults[line[1:].split(":")[0]]) else line
            for line in lines)
        with open(path, "w") as f:
            f.write(text)
        r, found = check_config(path)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        empty = os.path.join(self.tmp, "empty.yaml")
        with open(empty, "w"):
            pass
        _, plain = check_config(empty)
        from_file = [n for n, (_, src) in found.items() if src == "file"]
        self.assertGreater(len(from_file), 30)
        for name in from_file:
            self.assertEqual(found[name][0], plain[name][0], name)


if __name__ == "__main__":
    st.main()
