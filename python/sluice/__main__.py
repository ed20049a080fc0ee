"""python -m sluice run|info|doctor|top|registry ...: the sluice command.

A thin wrapper: it runs the `sluice` launcher with the same arguments. An
installed package (pip install) carries the launcher as sluice/bin/sluice,
and pip makes a `sluice` command for it; in a build tree the package runs
the launcher beside it (build/bin/sluice for build/python/sluice); else the
first `sluice` on PATH. For example:

    python -m sluice run -n 4 -- python prog.py
    sluice run -n 4 -- python prog.py        # the same, after pip install
"""

import os
import shutil
import sys
from pathlib import Path


def find_tool() -> str:
    here = Path(__file__).resolve().parent
    for candidate in (here / "bin" / "sluice", here.parents[1] / "bin" / "sluice"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    on_path = shutil.which("sluice")
    # The console script pip makes is itself called `sluice`: never run it
    # again from itself.
    if on_path and Path(on_path).resolve() != Path(sys.argv[0]).resolve():
        return on_path
    sys.exit("python -m sluice: no `sluice` launcher in the package "
             f"({here / 'bin' / 'sluice'}), beside it ({here.parents[1] / 'bin' / 'sluice'}) "
             "or on PATH: install the package with pip, or build the project (make build) "
             "or install it (make install) and put its bin directory on PATH")


def main() -> None:
    tool = find_tool()
    os.execv(tool, [tool, *sys.argv[1:]])


if __name__ == "__main__":
    main()
