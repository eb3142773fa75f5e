#!/usr/bin/env python3
"""The examples of docs/python.md and the README's Python quick start, run as written
against a real nanovmd (inside the test host: ``tools/testhost/run --with-daemon --
python3 sdk/python/tests/docs_examples_test.py``), in the order a reader meets them.

Each ```python block is one check. The README's block and the tour open clients of
their own; the blocks after the tour run inside the tour's ``with`` block, as the doc
says (``box`` and ``sandbox`` are the tour's), except the reconnect example, which
runs as a script of its own with ``saved_id`` set to the tour's sandbox. Where a
block's comment states its output, the check compares it. The sandboxes, snapshots and
template the examples leave are with-daemon's to delete. TAP."""

import contextlib
import io
import os
import re
import subprocess
import sys
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live import HERE, Live  # noqa: E402

from lithosbox import LithosBox, LithosBoxError  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TOUR_HEAD = "from lithosbox import LithosBox\n\nwith LithosBox() as box:\n"

# (a line of the block, what its printed output must contain): the outputs the docs'
# comments state.
EXPECT: List[Tuple[str, List[str]]] = [
    ('with LithosBox() as box:                              # finds the daemon', ["first result\n"]),
    ('sandbox.files.write("/work/plan.txt"', ["measure first\n", " oops\n"]),
    ('with sandbox.session() as shell:', ["/work/src\nfast\n"]),
    ('on_stdout=lambda text: print("out:"', ["out: 1\n", "out: 3\n"]),
    ('worker.send_stdin("3\\n", eof=True)', ["1\n2\n3\n"]),
    ('checkpoint = sandbox.snapshot()', ["first result\n\nTrue\nfirst result\n"]),
]


def python_blocks(path: str) -> List[Tuple[str, str]]:
    """The ```python blocks of a Markdown file, each with the heading it is under."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks, heading = [], ""
    for m in re.finditer(r"^(#+ [^\n]*)$|^```python\n(.*?)^```", text, re.M | re.S):
        if m.group(1):
            heading = m.group(1).lstrip("# ")
        else:
            blocks.append((heading, m.group(2)))
    return blocks


def run_block(src: str, scope: Dict[str, object], name: str) -> str:
    """Executes one block in ``scope``; answers what it printed (which must contain
    what EXPECT states for it)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(src, name, "exec"), scope)  # noqa: S102 -- the docs' own examples
    printed = out.getvalue()
    for line, wants in EXPECT:
        if line in src:
            for want in wants:
                if want not in printed:
                    raise AssertionError(f"the example printed {printed!r}, without {want!r}")
    return printed or "(nothing printed)"


def main() -> int:
    t = Live()
    readme = python_blocks(os.path.join(ROOT, "README.md"))
    docs = python_blocks(os.path.join(ROOT, "docs", "python.md"))
    t.ok(len(readme) == 1 and len(docs) >= 8 and docs[0][1].startswith(TOUR_HEAD),
         f"README.md has its Python quick start, docs/python.md {len(docs)} examples opening with the tour")
    for heading, src in readme:
        t.check(f"README.md '{heading}': the Python example runs as written",
                lambda src=src: run_block(src, {"__name__": "__main__"}, "README.md"))
    scope: Dict[str, object] = {"__name__": "__main__"}
    with LithosBox() as box:
        scope["box"] = box
        tour = "\n".join(line[4:] for line in docs[0][1][len(TOUR_HEAD):].split("\n"))
        if not t.check("docs/python.md 'A tour' runs as written", lambda: run_block(tour, scope, "tour")):
            return t.done()
        for i, (heading, src) in enumerate(docs[1:], 2):
            name = f"docs/python.md '{heading}' example {i} runs as written"
            if "saved_id" in src:
                def reconnect(src: str = src) -> bool:
                    script = f"saved_id = {scope['sandbox'].id!r}\n" + src  # type: ignore[attr-defined]
                    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
                    if r.returncode != 0 or "measure first" not in r.stdout:
                        raise AssertionError(f"exit {r.returncode}: {r.stdout}{r.stderr}")
                    return True
                t.check(name + " (as a script of its own, saved_id the tour's sandbox)", reconnect)
                continue
            t.check(name, lambda src=src, i=i: run_block(src, scope, f"example {i}"))
    sandbox = scope.get("sandbox")

    def closed() -> bool:
        try:
            sandbox.run("true")  # type: ignore[union-attr]
        except LithosBoxError as e:
            return e.code == "client_closed"
        return False
    t.check("after the tour's with block, sandbox.run raises LithosBoxError (client_closed), as the doc says",
            closed)
    return t.done()


if __name__ == "__main__":
    sys.exit(main())
