#!/usr/bin/env python3
"""Runs the client's unit tests (test_unit.py, against the fake daemon) under the
oldest Python the client supports, 3.9, when one is installed (pyenv's, or
python3.9 on PATH), else under this Python after checking that every module of the
client parses as 3.9 syntax (ast.parse(feature_version=(3, 9))). Prints which.
Usage: run_unit.py  (exit status: unittest's)"""

import ast
import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(os.path.dirname(HERE), "lithosbox")


def python39():
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for exe in sorted(glob.glob(os.path.join(root, "versions", "3.9.*", "bin", "python3")), reverse=True):
        if os.access(exe, os.X_OK):
            return exe
    return shutil.which("python3.9")


def main():
    for path in sorted(glob.glob(os.path.join(PKG, "*.py"))):
        with open(path, encoding="utf-8") as f:
            ast.parse(f.read(), path, feature_version=(3, 9))
    print(f"the client's {len(glob.glob(os.path.join(PKG, '*.py')))} modules parse as Python 3.9", flush=True)
    exe = python39()
    if exe is None:
        print("no Python 3.9 here: the unit tests run under " + sys.version.split()[0], flush=True)
        exe = sys.executable
    else:
        print(f"unit tests under {exe}", flush=True)
    return subprocess.call([exe, "-m", "unittest", "-v", "test_unit"], cwd=HERE)


if __name__ == "__main__":
    sys.exit(main())
