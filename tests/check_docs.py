#!/usr/bin/env python3
"""Every relative link in the repository's Markdown pages leads somewhere:
the file or folder it names exists, and the #anchor, where it has one, is
a heading of that page (as GitHub spells a heading's anchor).

    tests/check_docs.py [SOURCE_ROOT]

Pages are the *.md files under the root, less build folders (build*),
hidden ones and subprojects/. Links inside code (fenced blocks, `spans`)
are text, not links. Exits 1 listing each broken link as FILE:LINE.
"""

import os
import re
import sys

LINK = re.compile(r"\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
SKIP_DIRS = {"subprojects", "node_modules"}


def pages(root):
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and not d.startswith("build")
                         and d not in SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(top, name)


def outside_fences(path):
    """(line number, line) of a page, fenced code blocks left out."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
            elif not fenced:
                yield n, line


def prose(path):
    """Like outside_fences(), with code spans blanked: a link there is
    text."""
    for n, line in outside_fences(path):
        yield n, re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    """A heading's anchor as GitHub makes it: lower case, markup and
    punctuation dropped (letters, digits, '-', '_' and spaces stay),
    spaces turned to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    """The anchors of a page's headings (code spans keep their words
    there); the second heading of one name gets "-1", as on GitHub."""
    if path not in cache:
        seen = {}
        found = set()
        for _, line in outside_fences(path):
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else "%s-%d" % (base, n))
        cache[path] = found
    return cache[path]


def check(root):
    broken = []
    for page in pages(root):
        rel = os.path.relpath(page, root)
        for n, line in prose(page):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                path, _, anchor = target.partition("#")
                dest = (os.path.normpath(os.path.join(os.path.dirname(page),
                                                      path))
                        if path else page)
                if not os.path.exists(dest):
                    broken.append("%s:%d: %s: no such file" % (rel, n, target))
                elif anchor and not dest.endswith(".md"):
                    broken.append("%s:%d: %s: an anchor into a page that is "
                                  "not Markdown" % (rel, n, target))
                elif anchor and anchor not in anchors(dest):
                    broken.append("%s:%d: %s: no heading with that anchor "
                                  "in %s" % (rel, n, target,
                                             os.path.relpath(dest, root)))
    return broken


def main(argv):
    root = os.path.abspath(argv[0] if argv else
                           os.path.dirname(os.path.dirname(
                               os.path.abspath(__file__))))
    broken = check(root)
    for b in broken:
        print(b)
    if broken:
        print("%d broken link%s" % (len(broken), "" if len(broken) == 1
                                    else "s"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
