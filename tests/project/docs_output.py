"""What a docs page shows a command printing, checked against what it printed when the test ran it.

Which shown text is an output (``docs/development.md``, "The docs"):

- a ``text`` block right after a shell block the test runs, or after a ``python`` block, with
  only blank lines between the two fences: everything that block printed, stdout and stderr
  together as a terminal shows them;
- in a ``console`` block the test runs, the lines after each ``$ `` command, up to the next
  one: what that command printed.

Both sides are compared after ``normalize``: the page's free ports are put back to the fixed ones
the page names; what differs from run to run is replaced by a placeholder on both sides (a
duration ``1.23s`` / ``0.5 s`` / ``12 ms``, a date and time, a SHA-256 digest, a process id);
the JVM's own notice about its incubator modules, which no log setting reaches, is left out of
what was printed; trailing spaces go. In the shown text ``...`` stands for what the page leaves
out: a line of only ``...`` for any number of lines (none included), ``...`` inside a line for
any text on that line. So a page shows an excerpt by ``...`` lines before, between or after the
lines it keeps.

With ``DOCS_TEST_WRITE=1`` a shown output that differs is written back into its page as it was
printed (ports put back, nothing else changed): regenerate, then put the ``...`` back where the
page shows an excerpt, and check the diff.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

__all__ = [
    "JVM_NOTICE",
    "WRITE_ENV",
    "matches",
    "mismatch",
    "normalize",
    "rewrite_block",
    "writing",
]

WRITE_ENV = "DOCS_TEST_WRITE"
# Printed by the JVM itself on every start (Spark's launcher adds jdk.incubator.vector).
JVM_NOTICE = "WARNING: Using incubator modules:"

# What varies between runs, in the order applied, and the placeholder each becomes.
_VARYING = [
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d| UTC)?"), "<time>"),
    (re.compile(r"\b\d\d/\d\d/\d\d \d\d:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    (re.compile(r"\bpid \d+\b"), "pid <pid>"),
    (re.compile(r"(?<![\w.])\d+(?:\.\d+)? ?(?:s|ms)\b"), "<duration>"),
]
_ELLIPSIS = "..."


def normalize(text: str) -> str:
    """``text`` with what varies between runs replaced by placeholders (see the module doc)."""
    lines = []
    for line in text.splitlines():
        if line.startswith(JVM_NOTICE):
            continue
        for pattern, placeholder in _VARYING:
            line = pattern.sub(placeholder, line)
        lines.append(line.rstrip())
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""


def _pattern(shown: str) -> re.Pattern[str]:
    """The regular expression of a normalized shown output, its ``...`` as wildcards."""
    parts = []
    for line in shown.splitlines():
        if line.strip() == _ELLIPSIS:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\n]*?".join(re.escape(p) for p in line.split(_ELLIPSIS)) + r"\n")
    return re.compile("".join(parts))


def matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` is what ``shown`` (a page's text, with its ``...``) says."""
    return _pattern(normalize(shown)).fullmatch(normalize(printed)) is not None


def mismatch(where: str, shown: str, printed: str) -> str:
    """The failure message of an output that differs: a diff, shown against printed."""
    diff = difflib.unified_diff(
        normalize(shown).splitlines(),
        normalize(printed).splitlines(),
        fromfile=f"{where} (shown)",
        tofile="printed (normalized)",
        lineterm="",
    )
    return (
        f"{where}: the output shown differs from what was printed ('...' stands for any "
        f"lines or text; {WRITE_ENV}=1 writes what was printed into the page)\n"
        + "\n".join(diff)
    )


def writing() -> bool:
    """Whether the test writes outputs that differ back into their pages."""
    return os.environ.get(WRITE_ENV) == "1"


def rewrite_block(page: Path, lang: str, old: str, new: str) -> None:
    """Put ``new`` in place of the fenced ``lang`` block of ``page`` whose body is ``old``.

    The block keeps its indentation; a body that appears more than once is left alone.
    """
    text = page.read_text(encoding="utf-8")
    old_body = old if old.endswith("\n") else old + "\n"
    new_body = new if new.endswith("\n") else new + "\n"
    found = [m.start() for m in re.finditer(re.escape(f"```{lang}\n{old_body}```"), text)]
    if len(found) != 1:
        return
    start = found[0]
    end = start + len(f"```{lang}\n{old_body}```")
    page.write_text(text[:start] + f"```{lang}\n{new_body}```" + text[end:], encoding="utf-8")
