#!/usr/bin/env python3
"""The house as built: src/ and include/sluice/ are folders of layers, each
of which may include only its own layer and those below it, and no module
may include another that (through any chain) includes it back.

A module is a source and its header, by name: src/net/http.c and
include/sluice/net/http.h are net's http. A module split in pieces is
one: the sources that include its private NAME_impl.h, and that header.
One module depends on another when any of its files includes the other's
header. The layers, lowest first, are LAYERS; what sits at the top of
src/ and include/sluice/ (app*.c, routes.c, models_api.c, main.c) is the
wiring, one module.

DEBTS lists the includes that still climb a layer or close a loop, each
to be paid by handing the lower module a callback instead: the check
fails on any climb or loop not listed, and on a listed one that is gone
(so that the list only shrinks).

    tests/check_layers.py [SOURCE_ROOT]
"""

import os
import re
import sys

LAYERS = ["base", "net", "json", "sched", "config", "fleet", "tenants",
          "ops", "relay", "app"]

# (from, to): module names. Each climbs a layer or closes a loop.
DEBTS = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"sluice/(?:([a-z]+)/)?([a-z0-9_]+)\.h"',
                     re.M)
# A header beside its sources, shared by the pieces of one split module.
PRIVATE = re.compile(r'^\s*#\s*include\s+"([a-z0-9_]+)_impl\.h"', re.M)


def modules(root):
    """{module: (layer, [files])} of src/ and include/sluice/. The pieces
    of a split module (the sources that include its NAME_impl.h, and that
    header) are one module, NAME; the top of src/ and of include/sluice/
    is one module too, the wiring ("app")."""
    found = {}

    def add(module, layer, path):
        entry = found.setdefault(module, (layer, []))
        if entry[0] != layer:
            sys.exit("check_layers: %s is in %s/ and %s/" %
                     (module, entry[0], layer))
        entry[1].append(path)

    for base, ends in (("src", (".c", ".h")),
                       (os.path.join("include", "sluice"), (".h",))):
        top = os.path.join(root, base)
        for folder, _, names in os.walk(top):
            rel = os.path.relpath(folder, top)
            layer = "app" if rel == "." else rel
            for name in sorted(names):
                if not name.endswith(ends):
                    continue
                path = os.path.join(folder, name)
                module = name[:-2]
                if layer == "app":
                    module = "app"
                elif name.endswith("_impl.h"):
                    module = name[:-len("_impl.h")]
                else:
                    with open(path, encoding="utf-8") as f:
                        owner = PRIVATE.search(f.read())
                    if owner:
                        module = owner.group(1)
                add(module, layer, path)
    return found


def edges(found):
    """{(from, to)} for every include of one module's header by
    another."""
    out = set()
    for module, (_, files) in found.items():
        for path in files:
            with open(path, encoding="utf-8") as f:
                for m in INCLUDE.finditer(f.read()):
                    other = "app" if m.group(1) is None else m.group(2)
                    if other != module and other in found:
                        out.add((module, other))
    return out


def reaches(graph, start, goal):
    """Whether goal can be reached from start in graph."""
    seen, todo = {start}, [start]
    while todo:
        n = todo.pop()
        if n == goal:
            return True
        for m in graph.get(n, ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return False


def cycle(nodes, graph):
    """One loop in graph ({node: set(next)}) as a list, or None."""
    state = {}
    path = []

    def visit(n):
        state[n] = "open"
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = "done"
        path.pop()
        return None

    for n in sorted(nodes):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..")
    found = modules(root)
    for module, (layer, _) in sorted(found.items()):
        if layer not in LAYERS:
            print("check_layers: %s is in %s/, which is no layer" %
                  (module, layer))
            return 1
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    all_edges = edges(found)
    problems = []
    for a, b in sorted(all_edges - DEBTS):
        la, lb = found[a][0], found[b][0]
        if rank[lb] > rank[la]:
            problems.append("%s/%s includes %s/%s, a layer above it" %
                            (la, a, lb, b))
    for a, b in sorted(DEBTS - all_edges):
        problems.append("%s no longer includes %s: take it out of DEBTS" %
                        (a, b))
    full = {}
    for a, b in all_edges:
        full.setdefault(a, set()).add(b)
    for a, b in sorted(DEBTS & all_edges):
        if rank[found[b][0]] <= rank[found[a][0]] and \
                not reaches(full, b, a):
            problems.append("%s including %s neither climbs nor closes a "
                            "loop: take it out of DEBTS" % (a, b))
    graph = {}
    for a, b in all_edges - DEBTS:
        graph.setdefault(a, set()).add(b)
    loop = cycle(found, graph)
    if loop:
        problems.append("an include loop: " + " -> ".join(loop))
    for p in problems:
        print("check_layers: " + p)
    if not problems:
        print("check_layers: %d modules in %d layers, %d includes, %d of "
              "them debts" % (len(found), len(LAYERS), len(all_edges),
                              len(DEBTS)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
