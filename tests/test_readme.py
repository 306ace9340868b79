"""The README's commands, run as a reader would copy them: the first
requests (curl and python3) against the demo model, and the sluice.yaml
with two models and a key, its two demo models written, checked, hashed
and served, from a directory of the test's own. Only the port (the
README's 8080) and ./build/sluice's path change."""

import json
import os
import re
import shutil
import subprocess

import sluice_test as st

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                      "README.md")

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 120


def readme():
    with open(README) as f:
        return f.read()


def shell_commands(text):
    """The commands of the README's indented blocks (outside fenced
    ones), a line ending in a backslash joined with the next."""
    commands, fenced, pending = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or not line.startswith("    "):
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        commands.append(pending)
        pending = ""
    return commands


def yaml_block(text):
    """The README's one ```yaml block."""
    (block,) = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    return block


def run_shell(command, port, cwd=None):
    """A README command, on `port` instead of 8080, in `cwd`."""
    command = command.replace("127.0.0.1:8080", "127.0.0.1:%d" % port)
    command = command.replace("./build/sluice", st.SLUICE)
    return subprocess.run(["bash", "-c", command], capture_output=True,
                          text=True, timeout=SAFETY_NET_S, cwd=cwd)


class Readme(st.TestCase):

    def setUp(self):
        super().setUp()
        self.text = readme()
        self.commands = shell_commands(self.text)
        # The README's examples use curl; --tests installs it.
        self.assertIsNotNone(shutil.which("curl"), "curl is not installed "
                             "(./deploy/setup.sh --tests installs it)")

    def the(self, prefix, containing=""):
        found = [c for c in self.commands
                 if c.startswith(prefix) and containing in c]
        self.assertEqual(len(found), 1, (prefix, containing, found))
        return found[0]

    def test_the_first_requests_on_the_demo_model(self):
        s = self.sluice("--cache-dir", os.path.join(self.tmp, "cache"))
        curl = run_shell(self.the("curl", '"model": "demo"'), s.port)
        self.assertEqual(curl.returncode, 0, curl.stderr)
        answer = json.loads(curl.stdout)
        self.assertEqual(answer["usage"]["completion_tokens"], 16)
        python = run_shell(self.the("python3 -c"), s.port)
        self.assertEqual(python.returncode, 0, python.stderr)
        self.assertTrue(python.stdout.strip())

    def test_the_configuration_with_two_models_and_a_key(self):
        # The demo models, written where the file names them, from where
        # sluice then runs: the test's directory.
        made = [c for c in self.commands
                if c.startswith("mkdir ") or "--write-demo-model" in c]
        self.assertEqual(len(made), 3, made)
        for command in made:
            r = run_shell(command, 0, cwd=self.tmp)
            self.assertEqual(r.returncode, 0, (command, r.stderr))
        config = yaml_block(self.text)
        files = re.findall(r"^    model: (\S+)$", config, re.MULTILINE)
        self.assertEqual(files, ["models/chat.gguf", "models/small.gguf"])
        for f in files:
            self.assertTrue(os.path.isfile(os.path.join(self.tmp, f)), f)
        config = config.replace("listen: 127.0.0.1:8080",
                                "listen: 127.0.0.1:0")
        with open(os.path.join(self.tmp, "sluice.yaml"), "w") as f:
            f.write(config)
        # The hash in the file is what --hash-key prints for the secret.
        hashed = run_shell(self.the("printf", "--hash-key"), 0)
        self.assertEqual(hashed.returncode, 0, hashed.stderr)
        self.assertIn(hashed.stdout.strip(), config)
        check = self.the("./build/sluice --check-config")
        self.assertEqual(check, "./build/sluice --check-config sluice.yaml")
        r = run_shell(check, 0, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("./build/sluice --config sluice.yaml", self.commands)
        s = self.sluice("--config", "sluice.yaml", timeout=SAFETY_NET_S,
                        cwd=self.tmp)
        keyed = run_shell(self.the("curl", "Authorization"), s.port)
        self.assertEqual(keyed.returncode, 0, keyed.stderr)
        answer = json.loads(keyed.stdout)
        self.assertEqual((answer["model"],
                          answer["usage"]["completion_tokens"]),
                         ("small", 16))
        # And without the key, refused.
        r = s.post("/v1/chat/completions",
                   {"messages": [{"role": "user", "content": "Hello"}]})
        self.assertEqual(r.status, 401)


if __name__ == "__main__":
    st.main()
