#!/usr/bin/env python3
"""The house as built: src/ is a folder of layers, and include/sluice/
holds their public headers in folders of the same names. Each layer may
include only its own layer and those below it; no module may include
another that (through any chain) includes it back; and no file may
include one that (through any chain) includes it back.

A file is a .c or .h in src/LAYER/ or include/sluice/LAYER/; nothing of
C sits at the top of either. Its includes are every quoted one, as the
compiler finds it: "NAME.h" beside the file first, then
"sluice/LAYER/NAME.h" under include/. A header not in the tree
(generated, like sl_build_config.h, or a library's) is not the house's.

A module is a source and its header, by name: src/net/http.c and
include/sluice/net/http.h are net's http, and src/sched/predict.c and a
src/sched/predict.h beside it would be sched's predict. A module split in
pieces is one: the sources that include its private NAME_impl.h, and that
header. One module depends on another when any of its files includes the
other's. The layers, lowest first, are LAYERS; the last, app/, is the
wiring (start and stop, the models' table, reloads, routes, main), whose
modules are held to the same rules as any other layer's.

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

# Every quoted include; <...> are the system's and the libraries'.
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A header beside its sources, shared by the pieces of one split module.
PRIVATE = re.compile(r'^\s*#\s*include\s+"([a-z0-9_]+)_impl\.h"', re.M)
# Where the house's files are: (folder under the root, what ends a file).
TREES = (("src", (".c", ".h")), (os.path.join("include", "sluice"), (".h",)))


def files_of(root):
    """({path: (layer, module)}, problems) for every file of the house,
    paths relative to root. The pieces of a split module (the sources
    that include its NAME_impl.h, and that header) are one module, NAME."""
    found, problems = {}, []
    for base, ends in TREES:
        top = os.path.join(root, base)
        for folder, _, names in os.walk(top):
            rel = os.path.relpath(folder, top)
            for name in sorted(names):
                if not name.endswith(ends):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                if rel == "." or os.sep in rel:
                    problems.append("%s is not in a layer's folder "
                                    "(%s/LAYER/)" % (path, base))
                    continue
                module = name[:-2]
                if name.endswith("_impl.h"):
                    module = name[:-len("_impl.h")]
                else:
                    with open(os.path.join(root, path),
                              encoding="utf-8") as f:
                        owner = PRIVATE.search(f.read())
                    if owner:
                        module = owner.group(1)
                found[path] = (rel, module)
    return found, problems


def resolve(root, path, name, found):
    """The file of the house that `#include "name"` in `path` reads, as
    the compiler looks: beside path, then under include/; or None."""
    for folder in (os.path.dirname(path), "include"):
        candidate = os.path.normpath(os.path.join(folder, name))
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate if candidate in found else None
    return None


def file_edges(root, found):
    """{(from, to)}: paths of the house, one including the other."""
    out = set()
    for path in found:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            for m in INCLUDE.finditer(f.read()):
                other = resolve(root, path, m.group(1), found)
                if other and other != path:
                    out.add((path, other))
    return out


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


def loops(nodes, graph):
    """One loop (a list) for each group of nodes that reach each other
    in graph, so that every tangle is named, not only the first."""
    out, done = [], set()
    for n in sorted(nodes):
        if n in done:
            continue
        group = {m for m in nodes
                 if reaches(graph, n, m) and reaches(graph, m, n)}
        done |= group
        if len(group) > 1:
            out.append(cycle(group, {a: graph.get(a, set()) & group
                                     for a in group}))
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


def check(root, debts=frozenset(DEBTS)):
    """(problems, summary) for the tree at root: each problem one line."""
    found, problems = files_of(root)
    layer_of = {}
    for path, (layer, module) in sorted(found.items()):
        if layer not in LAYERS:
            problems.append("%s is in %s/, which is no layer" %
                            (path, layer))
        elif layer_of.setdefault(module, layer) != layer:
            problems.append("module %s is in %s/ and %s/" %
                            (module, layer_of[module], layer))
    if problems:
        return problems, None
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    files = file_edges(root, found)
    edges = {(found[a][1], found[b][1]) for a, b in files
             if found[a][1] != found[b][1]}
    for a, b in sorted(edges - debts):
        la, lb = layer_of[a], layer_of[b]
        if rank[lb] > rank[la]:
            problems.append("%s/%s includes %s/%s, a layer above it" %
                            (la, a, lb, b))
    for a, b in sorted(debts - edges):
        problems.append("%s no longer includes %s: take it out of DEBTS" %
                        (a, b))
    full = {}
    for a, b in edges:
        full.setdefault(a, set()).add(b)
    for a, b in sorted(debts & edges):
        if rank[layer_of[b]] <= rank[layer_of[a]] and \
                not reaches(full, b, a):
            problems.append("%s including %s neither climbs nor closes a "
                            "loop: take it out of DEBTS" % (a, b))
    graph = {}
    for a, b in edges - debts:
        graph.setdefault(a, set()).add(b)
    for loop in loops(layer_of, graph):
        problems.append("an include loop between modules: " +
                        " -> ".join(loop))
    # Files: a loop inside one module's pieces is as much a loop.
    graph = {}
    for a, b in files:
        if (found[a][1], found[b][1]) not in debts:
            graph.setdefault(a, set()).add(b)
    for loop in loops(found, graph):
        problems.append("an include loop between files: " +
                        " -> ".join(loop))
    summary = ("%d modules in %d layers, %d includes between them (%d "
               "between files), %d of them debts" %
               (len(layer_of), len(LAYERS), len(edges), len(files),
                len(debts)))
    return problems, summary


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..")
    problems, summary = check(root)
    for p in problems:
        print("check_layers: " + p)
    if not problems:
        print("check_layers: " + summary)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
