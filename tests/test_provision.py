"""deploy/provision-llama-server.sh against a fake apt-get: what it does
when the mirror's Release file has expired (a snapshot mirror) and when
apt-get update fails for any other reason; and, over packages unpacked
before, how it renews an older wrapper without apt-get and what the
wrapper starts.

Nothing here touches the network or the real cache: a fake apt-get and
dpkg come first on PATH, the cache and home are temporary directories, and
the fake download always fails with a message the tests recognise, so the
script never gets further than that."""

import os
import subprocess

import sluice_test as st

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                      "deploy", "provision-llama-server.sh")
MIRROR = "http://mirror.invalid/debian"
INRELEASE = MIRROR + "/dists/sid/InRelease"

# apt's own wording (apt 2.x, acquire-item.cc), as apt-get update prints it.
EXPIRED = ("E: Release file for %s is expired (invalid since 412d 3h 2min "
           "7s). Updates for this repository will not be applied." % INRELEASE)
UNREACHABLE = ("E: Failed to fetch %s  Could not resolve 'mirror.invalid'"
               % INRELEASE)
DOWNLOAD_REFUSED = "E: fake apt-get: no downloads in tests"
NO_DATE_CHECK = "Acquire::Check-Valid-Until=false"
RETRY_LINE = ("provision: the mirror's sid Release file has expired (a "
              "snapshot mirror?): retrying with %s (signatures are still "
              "checked)" % NO_DATE_CHECK)

# The fake apt-get logs each call's arguments, one call a line, and answers
# "update" with the lines in $FAKE_APT_UPDATE (those of a call that passes
# Check-Valid-Until=false come from $FAKE_APT_UPDATE_NO_DATE_CHECK): exit
# status 100 when they hold an error, as apt's. "download" always fails.
FAKE_APT_GET = r"""#!/bin/sh
printf '%s\n' "$*" >>"$FAKE_APT_LOG"
case " $* " in
*" update "*)
	out=$FAKE_APT_UPDATE
	case " $* " in
	*" Acquire::Check-Valid-Until=false "*) out=$FAKE_APT_UPDATE_NO_DATE_CHECK ;;
	esac
	echo "Get:1 http://mirror.invalid/debian sid InRelease [198 kB]"
	echo "Reading package lists..."
	[ -z "$out" ] && exit 0
	printf '%s\n' "$out" >&2
	case "$out" in *"E: "*) exit 100 ;; esac
	exit 0 ;;
*" download "*)
	echo "E: fake apt-get: no downloads in tests" >&2
	exit 100 ;;
esac
echo "fake apt-get: unexpected call: $*" >&2
exit 2
"""

FAKE_DPKG = r"""#!/bin/sh
[ "$1" = --print-architecture ] && { echo amd64; exit 0; }
echo "fake dpkg: unexpected call: $*" >&2
exit 2
"""


class FakeApt(st.TestCase):
    """The script with the fakes first on PATH, in a temporary cache."""

    def setUp(self):
        super().setUp()
        bin_dir = os.path.join(self.tmp, "bin")
        os.mkdir(bin_dir)
        for name, text in (("apt-get", FAKE_APT_GET), ("dpkg", FAKE_DPKG)):
            path = os.path.join(bin_dir, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        self.log = os.path.join(self.tmp, "apt-get.log")
        self.cache = os.path.join(self.tmp, "cache")
        self.env = {
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "HOME": os.path.join(self.tmp, "home"),
            "SLUICE_CACHE_DIR": self.cache,
            "SLUICE_DEBIAN_MIRROR": MIRROR,
            "FAKE_APT_LOG": self.log,
        }

    def provision(self, update, update_no_date_check=""):
        """Runs the script; returns (exit status, stdout, stderr, the
        apt-get calls)."""
        env = dict(self.env, FAKE_APT_UPDATE=update,
                   FAKE_APT_UPDATE_NO_DATE_CHECK=update_no_date_check)
        p = subprocess.run(["bash", SCRIPT], env=env, capture_output=True,
                           text=True, timeout=60)
        calls = []
        if os.path.exists(self.log):
            with open(self.log) as f:
                calls = f.read().splitlines()
        return p.returncode, p.stdout, p.stderr, calls

    def assert_nothing_provisioned(self):
        self.assertFalse(os.path.exists(os.path.join(self.cache, "llama.cpp",
                                                     "bin")))


class Provision(FakeApt):

    def test_expired_release_is_retried_without_the_date_check(self):
        code, out, err, calls = self.provision(EXPIRED)
        self.assertEqual(code, 1, out + err)
        self.assertEqual(out.splitlines(), [
            "provision: fetching the package list of Debian unstable (sid) "
            "from " + MIRROR,
            RETRY_LINE,
            "provision: downloading llama.cpp-tools libllama0 libggml0 libc6 "
            "libstdc++6 libgcc-s1 libgomp1 libssl3t64 libzstd1 zlib1g "
            "openssl-provider-legacy libc-gconv-modules-extra",
        ])
        # It got past the update: the failure is the fake download's.
        self.assertEqual(err, "provision: error: download failed: "
                         + DOWNLOAD_REFUSED + "\n")
        self.assertEqual([c.split()[-1] if "update" in c.split() else
                          "download" for c in calls],
                         ["update", "update", "download"])
        # Only the retry skips the date check, and nothing ever switches
        # off signature checking.
        self.assertNotIn(NO_DATE_CHECK, calls[0])
        self.assertIn("-o " + NO_DATE_CHECK, calls[1])
        self.assertIn("-o " + NO_DATE_CHECK, calls[2])
        for call in calls:
            self.assertNotIn("AllowInsecure", call)
            self.assertNotIn("trusted", call)
            self.assertNotIn("Check-Signature", call)
        self.assert_nothing_provisioned()

    def test_other_update_errors_fail_at_once_naming_them(self):
        for update in (UNREACHABLE, EXPIRED + "\n" + UNREACHABLE):
            with self.subTest(update=update):
                if os.path.exists(self.log):
                    os.remove(self.log)
                code, out, err, calls = self.provision(update)
                self.assertEqual(code, 1, out + err)
                self.assertNotIn("retrying", out)
                self.assertEqual(len(calls), 1, calls)
                self.assertIn(" update", calls[0])
                self.assertEqual(err.splitlines(), [
                    "provision: error: apt-get update of sid failed: "
                    + " ".join(update.splitlines())])
                self.assert_nothing_provisioned()

    def test_a_retry_that_fails_otherwise_names_that_error(self):
        code, out, err, calls = self.provision(EXPIRED, UNREACHABLE)
        self.assertEqual(code, 1, out + err)
        self.assertIn(RETRY_LINE, out.splitlines())
        self.assertEqual(len(calls), 2, calls)
        self.assertEqual(err, "provision: error: apt-get update of sid "
                         "failed: " + UNREACHABLE + "\n")
        self.assert_nothing_provisioned()



# Stands in for the prefix's dynamic loader: says the name the kernel gave
# its process (a process is named after the file it was started from) and
# the arguments it was given.
FAKE_LOADER = r"""#!/bin/sh
read -r comm </proc/$$/comm
echo "comm=$comm"
echo "ui=${LLAMA_ARG_STATIC_PATH:-}"
printf 'arg=%s\n' "$@"
"""

# The wrapper as the script wrote it before it named the process: it
# starts the loader by the loader's own name.
OLD_WRAPPER = """#!/bin/sh
p='%(prefix)s/usr/lib/x86_64-linux-gnu'
[ -n "${LLAMA_ARG_STATIC_PATH:-}" ] || export LLAMA_ARG_STATIC_PATH='%(ui)s'
exec "$p/ld-linux-x86-64.so.2" --library-path "$p:$p/llama" \
    '%(prefix)s/usr/bin/llama-server' "$@"
"""


class Wrapper(FakeApt):
    """A cache provisioned before: packages unpacked under prefix/, an
    older wrapper in bin/."""

    def setUp(self):
        super().setUp()
        dest = os.path.join(self.cache, "llama.cpp")
        self.prefix = os.path.join(dest, "prefix")
        self.libdir = os.path.join(self.prefix, "usr", "lib",
                                   "x86_64-linux-gnu")
        self.ui = os.path.join(self.prefix, "usr", "share", "llama.cpp",
                               "llama-server", "ui")
        self.wrapper = os.path.join(dest, "bin", "llama-server")
        for path, text in (
                (os.path.join(self.libdir, "ld-linux-x86-64.so.2"),
                 FAKE_LOADER),
                (os.path.join(self.prefix, "usr", "bin", "llama-server"), ""),
                (os.path.join(self.ui, "index.html"), "<html></html>"),
                (self.wrapper, OLD_WRAPPER % {"prefix": self.prefix,
                                              "ui": self.ui})):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)

    def test_an_older_wrapper_is_renewed_without_apt(self):
        code, out, err, calls = self.provision("")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(out, "provision: wrote a new wrapper for the "
                         "packages already in %s: %s\n"
                         % (self.prefix, self.wrapper))
        self.assertEqual(calls, [])
        # Once renewed, it is left as it is.
        code, out, err, calls = self.provision("")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(out, "provision: already provisioned: %s\n"
                         % self.wrapper)
        self.assertEqual(calls, [])

    def test_the_process_is_named_llama_server(self):
        self.assertEqual(self.provision("")[0], 0)
        p = subprocess.run([self.wrapper, "--version"], capture_output=True,
                           text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), [
            "comm=llama-server",
            "ui=" + self.ui,
            "arg=--argv0", "arg=llama-server",
            "arg=--library-path",
            "arg=%s:%s/llama" % (self.libdir, self.libdir),
            "arg=" + os.path.join(self.prefix, "usr", "bin", "llama-server"),
            "arg=--version"])
        # Through a link that moves with the prefix.
        self.assertEqual(
            os.readlink(os.path.join(self.prefix, "libexec", "llama-server")),
            "../usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")


if __name__ == "__main__":
    st.main()
