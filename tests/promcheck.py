"""A checker for Prometheus' text exposition format (version 0.0.4), after
the rules promtool and the Prometheus parser enforce: metric and label names,
label-value escapes, one HELP and TYPE per family, before its samples, a
family's samples together, no duplicate series, and histograms whose buckets
never decrease and end at +Inf equal to _count, with a _sum. Also the lint
of `promtool check metrics`: no colons in names, counters end in _total."""

import math
import re

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
SUFFIXES = ("_bucket", "_sum", "_count")


class ExpositionError(AssertionError):
    pass


def parse_labels(text, where):
    """'a="x",b="y"' -> {"a": "x", "b": "y"}, checking names and escapes."""
    labels, i = {}, 0
    while i < len(text):
        m = re.match(r"([^=]*)=\"", text[i:])
        if not m or not LABEL.match(m.group(1)):
            raise ExpositionError("%s: bad label name at %r" % (where, text[i:]))
        name, i = m.group(1), i + m.end()
        value = ""
        while True:
            if i >= len(text):
                raise ExpositionError("%s: unterminated label value" % where)
            c = text[i]
            if c == "\\":
                nxt = text[i + 1:i + 2]
                if nxt not in ("\\", '"', "n"):
                    raise ExpositionError("%s: bad escape \\%s" % (where, nxt))
                value += {"n": "\n"}.get(nxt, nxt)
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise ExpositionError("%s: newline in a label value" % where)
            else:
                value += c
                i += 1
        if name in labels:
            raise ExpositionError("%s: label %s twice" % (where, name))
        labels[name] = value
        if i < len(text):
            if text[i] != ",":
                raise ExpositionError("%s: expected ',' at %r" % (where, text[i:]))
            i += 1
    return labels


def parse_value(text, where):
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    try:
        return float(text)
    except ValueError:
        raise ExpositionError("%s: bad value %r" % (where, text))


def family_of(name, types):
    if name in types:
        return name
    for s in SUFFIXES:
        if name.endswith(s) and types.get(name[:-len(s)]) in ("histogram",
                                                               "summary"):
            return name[:-len(s)]
    return name


def check(text):
    """Checks an exposition; returns {(name, sorted label items): value}."""
    if text and not text.endswith("\n"):
        raise ExpositionError("the exposition does not end with a newline")
    types, helps, samples, order = {}, set(), {}, []
    done = set()  # families whose samples are over
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d" % n
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not NAME.match(name):
                    raise ExpositionError("%s: bad name %r" % (where, name))
                if name in done or (current and current != name and
                                    name in [f for f, _ in order]):
                    raise ExpositionError("%s: %s's metadata after its "
                                          "samples" % (where, name))
                if parts[1] == "HELP":
                    if name in helps:
                        raise ExpositionError("%s: second HELP for %s"
                                              % (where, name))
                    helps.add(name)
                else:
                    if name in types:
                        raise ExpositionError("%s: second TYPE for %s"
                                              % (where, name))
                    if len(parts) < 4 or parts[3] not in TYPES:
                        raise ExpositionError("%s: bad TYPE line" % where)
                    types[name] = parts[3]
            continue
        m = re.match(r"([^{ ]+)(\{(.*)\})? (\S+)( (-?\d+))?$", line)
        if not m:
            raise ExpositionError("%s: not a sample: %r" % (where, line))
        name = m.group(1)
        if not NAME.match(name) or ":" in name:
            raise ExpositionError("%s: bad name %r" % (where, name))
        labels = parse_labels(m.group(3) or "", where)
        value = parse_value(m.group(4), where)
        family = family_of(name, types)
        if family != current:
            if family in done:
                raise ExpositionError("%s: %s's samples are not together"
                                      % (where, family))
            if current:
                done.add(current)
            current = family
            order.append((family, types.get(family, "untyped")))
        key = (name, tuple(sorted(labels.items())))
        if key in samples:
            raise ExpositionError("%s: duplicate series %s" % (where, key))
        samples[key] = value
    for family, kind in order:
        if kind == "histogram":
            check_histogram(family, samples)
        if kind == "counter" and not family.endswith("_total"):
            raise ExpositionError("counter %s does not end in _total" % family)
    return samples


def check_histogram(family, samples):
    series = {}
    for (name, labels), value in samples.items():
        if name == family + "_bucket":
            rest = tuple(kv for kv in labels if kv[0] != "le")
            le = dict(labels).get("le")
            if le is None:
                raise ExpositionError("%s: a bucket without le" % family)
            series.setdefault(rest, []).append((parse_value(le, family), value))
    if not series:
        raise ExpositionError("%s: a histogram without buckets" % family)
    for rest, buckets in series.items():
        buckets.sort()
        counts = [c for _, c in buckets]
        if any(b < a for a, b in zip(counts, counts[1:])):
            raise ExpositionError("%s%s: bucket counts decrease" % (family, rest))
        if not math.isinf(buckets[-1][0]):
            raise ExpositionError("%s%s: no +Inf bucket" % (family, rest))
        count = samples.get((family + "_count", rest))
        if count is None or (family + "_sum", rest) not in samples:
            raise ExpositionError("%s%s: no _count or _sum" % (family, rest))
        if count != buckets[-1][1]:
            raise ExpositionError("%s%s: +Inf bucket %g != _count %g"
                                  % (family, rest, buckets[-1][1], count))


def value(samples, name, **labels):
    """A sample's value, or 0 when the series does not exist yet."""
    return samples.get((name, tuple(sorted(labels.items()))), 0)
