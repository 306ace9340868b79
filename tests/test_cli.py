"""The sluice command line: help, version, bad values, one-shot actions."""

import os
import socket
import subprocess

import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240


def run(*args, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    full.update(env or {})
    return subprocess.run([st.SLUICE, *args], capture_output=True, text=True,
                          env=full, timeout=SAFETY_NET_S)


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
                        "--probe"):
                continue
            var = "SLUICE_" + flag[2:].upper().replace("-", "_")
            if flag == "--llama-arg":
                var = "SLUICE_LLAMA_ARGS"
            self.assertRegex(text, r"\[%s; default: [^\]]+\]" % var,
                             "%s has no environment twin or default" % flag)

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


if __name__ == "__main__":
    st.main()
