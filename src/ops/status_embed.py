#!/usr/bin/env python3
"""Turns the status page (status.html) into a C header at build time:
its bytes as an array, sl_status_page, and the SHA-256 of its one inline
<script> and one inline <style>, as a Content-Security-Policy names them
('sha256-BASE64'), so that the page is served with a policy that allows
those two and nothing else (status.c). The page stays a real .html file
in the source tree, readable and checkable on its own.

    status_embed.py status.html status_page.h
"""

import base64
import hashlib
import re
import sys

# Bytes a line of the array holds: a dozen "0x.., " fit in 80 columns.
PER_LINE = 12


def inline_hash(page, tag):
    """'sha256-...' of the text between <tag> and </tag>: exactly one,
    without attributes, as the browser hashes it."""
    found = re.findall(rb"<%s>(.*?)</%s>" % (tag, tag), page, re.S)
    others = re.findall(rb"<%s[\s>]" % tag, page)
    if len(found) != 1 or len(others) != 1:
        sys.exit("status_embed.py: the page needs exactly one <%s> "
                 "without attributes (found %d)" % (tag.decode(),
                                                     len(others)))
    digest = hashlib.sha256(found[0]).digest()
    return "'sha256-%s'" % base64.b64encode(digest).decode()


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        page = f.read()
    lines = ["/* Generated from src/ops/status.html by status_embed.py: "
             "do not edit. */",
             "#define SL_STATUS_PAGE_SCRIPT_HASH \"%s\""
             % inline_hash(page, b"script"),
             "#define SL_STATUS_PAGE_STYLE_HASH \"%s\""
             % inline_hash(page, b"style"),
             "static const unsigned char sl_status_page[] = {"]
    for i in range(0, len(page), PER_LINE):
        lines.append("\t" + " ".join("0x%02x," % b
                                     for b in page[i:i + PER_LINE]))
    lines.append("};")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
