"""The sluice command line: help, version, bad values, one-shot actions."""

import os
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
            if flag in ("--help", "--version", "--write-demo-model"):
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


if __name__ == "__main__":
    st.main()
