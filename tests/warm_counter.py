"""A test workload for mlrepro.runs.warm: it counts, in a module-level variable, the runs its process made.

Run as ``python -m tests.warm_counter SEED``: prints one JSON line. A warm parent imports this module
once; each run's child increments the imported module's counter, so a run that saw an earlier run's
state would print a count above 1.
"""

from __future__ import annotations

import json
import os
import sys

RUNS = 0


def main() -> None:
    global RUNS
    RUNS += 1
    print(json.dumps({"runs": RUNS, "pid": os.getpid(), "ppid": os.getppid(), "seed": int(sys.argv[1]),
                      "cwd": os.getcwd(), "marker": os.environ.get("WARM_TEST_MARKER"),
                      "cwd_on_path": any(os.path.abspath(p or ".") == os.getcwd() for p in sys.path)}), flush=True)


if __name__ == "__main__":
    import tests.warm_counter as loaded  # the module instance the process imported (the parent's, when warm)

    loaded.main()
