"""python -m sluice run|info|doctor|top|registry ...: the sluice command.

A thin wrapper: it runs the `sluice` launcher with the same arguments, the
one beside this package in a build tree (build/bin/sluice for
build/python/sluice), else the first on PATH. For example:

    python -m sluice run -n 4 -- python prog.py
"""

import os
import shutil
import sys
from pathlib import Path


def find_tool() -> str:
    beside = Path(__file__).resolve().parents[2] / "bin" / "sluice"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    on_path = shutil.which("sluice")
    if on_path:
        return on_path
    sys.exit("python -m sluice: no `sluice` command beside this package "
             f"({beside}) or on PATH: build the project (make build) or install it "
             "(make install) and put its bin directory on PATH")


def main() -> None:
    tool = find_tool()
    os.execv(tool, [tool, *sys.argv[1:]])


if __name__ == "__main__":
    main()
