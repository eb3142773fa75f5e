#!/usr/bin/env python3
"""The documented offline install works: in a fresh virtual environment made with
--system-site-packages, exactly `pip install --no-build-isolation sdk/python` (a copy
of it, so the checkout stays clean) installs lithosbox with py.typed, importable from
elsewhere. Needs a Python with setuptools >= 61 and wheel (Debian's python3 with
python3-setuptools and python3-wheel); exit 77 (skipped, saying why) without one.
Usage: install_test.py"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)

PROBE = ("import setuptools, wheel, sys; v = tuple(int(x) for x in setuptools.__version__.split('.')[:2]); "
         "sys.exit(0 if v >= (61, 0) else 1)")


def builder():
    for exe in ("/usr/bin/python3", sys.executable):
        if os.path.exists(exe) and subprocess.call([exe, "-c", PROBE], stderr=subprocess.DEVNULL) == 0:
            return exe
    return None


def main():
    exe = builder()
    if exe is None:
        print("SKIP: no Python here has setuptools >= 61 and wheel (Debian: python3-setuptools python3-wheel)")
        return 77
    with tempfile.TemporaryDirectory(prefix="lithosbox-install.") as tmp:
        src = os.path.join(tmp, "python")
        shutil.copytree(SDK, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
        venv = os.path.join(tmp, "venv")
        subprocess.check_call([exe, "-m", "venv", "--system-site-packages", venv])
        pip = [os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index", src]
        print("$", " ".join(pip), flush=True)
        subprocess.check_call(pip)
        out = subprocess.check_output(
            [os.path.join(venv, "bin", "python"), "-c",
             "import lithosbox, os; d = os.path.dirname(lithosbox.__file__); "
             "print(lithosbox.__version__, os.path.exists(os.path.join(d, 'py.typed')), d)"],
            cwd=tmp, text=True)
        print(out.strip())
        version, typed, where = out.split()
        if typed != "True" or not where.startswith(venv):
            print(f"FAIL: py.typed installed: {typed}; installed at {where}")
            return 1
    print(f"ok: installed with {exe}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
