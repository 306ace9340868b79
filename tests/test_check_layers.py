#!/usr/bin/env python3
"""check_layers.py on small trees made here: each loop and climb it must
refuse, and a clean tree it must accept. Each tree is a dict of paths
(under a temporary root) to the includes of that file.

    tests/test_check_layers.py
"""

import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "check_layers.py")

# A house that keeps the rules: the scheduler's pieces share a private
# header, the wiring's files include one way (main -> app -> routes ->
# models_api -> app_models -> app_state).
CLEAN = {
    "src/base/common.c": ["sluice/base/common.h"],
    "include/sluice/base/common.h": [],
    "src/sched/sched.c": ["sluice/sched/sched.h", "sched_impl.h",
                          "sluice/base/common.h"],
    "src/sched/flows.c": ["sched_impl.h"],
    "src/sched/sched_impl.h": ["sluice/sched/sched.h"],
    "include/sluice/sched/sched.h": [],
    "src/app/main.c": ["app.h", "sl_build_config.h"],
    "src/app/app.c": ["app.h", "routes.h", "app_models.h", "app_state.h"],
    "src/app/app.h": [],
    "src/app/routes.c": ["routes.h", "models_api.h", "app_state.h"],
    "src/app/routes.h": [],
    "src/app/models_api.c": ["models_api.h", "app_models.h"],
    "src/app/models_api.h": ["app_state.h"],
    "src/app/app_models.c": ["app_models.h", "sluice/sched/sched.h"],
    "src/app/app_models.h": ["app_state.h"],
    "src/app/app_state.h": ["sluice/sched/sched.h"],
}


def changed(base, **edits):
    """base with some files' includes replaced (a path's / written __,
    its . written _dot_), or the file dropped (None)."""
    tree = dict(base)
    for key, includes in edits.items():
        path = key.replace("__", "/").replace("_dot_", ".")
        if includes is None:
            tree.pop(path)
        else:
            tree[path] = includes
    return tree


def problems(tree):
    with tempfile.TemporaryDirectory() as root:
        for path, includes in tree.items():
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write("/* %s */\n" % os.path.basename(path))
                for name in includes:
                    f.write('#include "%s"\n' % name)
                f.write("#include <stdio.h>\n")
        # As meson runs it: the problems, one a line, and a failure.
        run = subprocess.run([sys.executable, CHECK, root],
                             capture_output=True, text=True, check=False)
        lines = [line[len("check_layers: "):]
                 for line in run.stdout.splitlines()]
        if run.returncode == 0:
            return []
        return lines if run.returncode == 1 else [run.stderr]


CASES = [
    # name, tree, and every problem the check must say, in its order
    ("clean", CLEAN),
    # sched.c -> flows.h -> sched.h, flows.h a header of its own module
    # beside sched.c (the loop as main had it): sched <-> flows.
    ("sched and flows",
     changed(CLEAN, src__sched__sched_dot_c=["sluice/sched/sched.h",
                                            "flows.h"],
             src__sched__flows_dot_c=["flows.h"],
             src__sched__flows_dot_h=["sluice/sched/sched.h"],
             src__sched__sched_impl_dot_h=None),
     "an include loop between modules: flows -> sched -> flows"),
    # The wiring's pieces, each its own module: app_models calls back up.
    ("app pieces",
     changed(CLEAN, src__app__app_models_dot_c=["app_models.h", "app.h"]),
     "an include loop between modules: app -> app_models -> app"),
    # routes.h -> app.h, app.c -> routes.h: app <-> routes.
    ("app and routes",
     changed(CLEAN, src__app__routes_dot_h=["app.h"]),
     "an include loop between modules: app -> routes -> app"),
    # Three modules in one layer: models_api -> app_models -> routes.
    ("a longer loop",
     changed(CLEAN, src__app__app_models_dot_h=["app_state.h",
                                                "routes.h"]),
     "an include loop between modules: app_models -> routes -> "
     "models_api -> app_models"),
    # Two loops apart: each is named, not only the first.
    ("two loops",
     changed(CLEAN, src__app__routes_dot_h=["app.h"],
             src__sched__flows_dot_c=["flows.h"],
             src__sched__flows_dot_h=["sluice/sched/sched.h"],
             src__sched__sched_impl_dot_h=None,
             src__sched__sched_dot_c=["sluice/sched/sched.h", "flows.h"]),
     "an include loop between modules: app -> routes -> app",
     "an include loop between modules: flows -> sched -> flows"),
    # Two headers of one split module (queue.h is sched's, as it includes
    # sched_impl.h) that include each other: no loop between modules.
    ("files of one module",
     changed(CLEAN, src__sched__sched_impl_dot_h=["sluice/sched/sched.h",
                                                  "queue.h"],
             src__sched__queue_dot_h=["sched_impl.h"]),
     "an include loop between files: src/sched/queue.h -> "
     "src/sched/sched_impl.h -> src/sched/queue.h"),
    # A lower layer that reaches up.
    ("a climb",
     changed(CLEAN, src__base__log_dot_c=["sluice/sched/sched.h"]),
     "base/log includes sched/sched, a layer above it"),
    # The wiring at the top of src/, as it was: no layer of its own.
    ("the top of src",
     changed(CLEAN, src__app_dot_c=["sluice/app.h"],
             include__sluice__app_dot_h=[]),
     "src/app.c is not in a layer's folder (src/LAYER/)",
     "include/sluice/app.h is not in a layer's folder "
     "(include/sluice/LAYER/)"),
    ("no such layer",
     changed(CLEAN, src__misc__misc_dot_c=[]),
     "src/misc/misc.c is in misc/, which is no layer"),
]


def main():
    failed = 0
    for name, tree, *want in CASES:
        got = problems(tree)
        ok = sorted(got) == sorted(want)
        print("%s: %s%s" % ("ok" if ok else "FAILED", name,
                            "" if ok else ": got %r, want %r" % (got, want)))
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
