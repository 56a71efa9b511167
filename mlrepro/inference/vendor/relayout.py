"""A staged package of the v5.1 layout (separate ``measurements/`` and ``compliance/`` trees, ``code/``: NVIDIA's
staging scripts up to v4.1 write it) rewritten in the layout the official checker reads from v6.0 on, so that the
v6.1 checker can judge it. It copies; the staged package is never written. Exactly four things change, each named
in the list :func:`to_results_layout` returns (written beside the package as ``relayout.txt``):

- ``measurements/<sys>/<model>/<scenario>/<sys>_<scenario>.json`` becomes
  ``results/<sys>/<model>/<scenario>/measurements.json``, and that folder's ``user.conf`` and ``README.md`` move
  beside it (the rest of it, mlperf.conf and NVIDIA's calibration notes, has no place in the new layout);
- ``compliance/<sys>/<model>/<scenario>/<TEST>/`` becomes ``results/<sys>/<model>/<scenario>/<TEST>/``;
- ``code/`` becomes ``src/``.

Nothing inside a file changes: the logs, their hashes and the model names are the staging scripts'.
"""

from __future__ import annotations

import shutil
from pathlib import Path

MOVED_MEASUREMENTS = ("user.conf", "README.md")


def _scenarios(tree: Path) -> list[Path]:
    """``tree/<sys>/<model>/<scenario>`` folders, as paths relative to ``tree`` (links are not followed)."""
    return sorted(p.relative_to(tree) for p in tree.glob("*/*/*") if p.is_dir() and not p.is_symlink())


def to_results_layout(staged: Path, out: Path) -> list[str]:
    """``staged`` (``<division>/<org>/`` folders) rewritten into ``out``, which must not exist; the changes made."""
    if out.exists():
        raise FileExistsError(f"{out}: exists; relayout writes a new folder")
    def moved(folder: str, names: list[str]) -> list[str]:  # <division>/<org>/measurements and compliance only
        depth = len(Path(folder).relative_to(staged).parts)
        return [n for n in names if depth == 2 and n in ("measurements", "compliance")]

    shutil.copytree(staged, out, symlinks=True, ignore=moved)
    changes: list[str] = []
    for org_dir in sorted(p for p in staged.glob("*/*") if p.is_dir() and not p.is_symlink()):
        rel = org_dir.relative_to(staged)
        dst = out / rel
        if (dst / "code").is_dir():
            (dst / "code").rename(dst / "src")
            changes.append(f"{rel}/code -> {rel}/src")
        for scen in _scenarios(org_dir / "measurements"):
            sys_name, scenario = scen.parts[0], scen.parts[2]
            src, res = org_dir / "measurements" / scen, dst / "results" / scen
            res.mkdir(parents=True, exist_ok=True)
            system_json = src / f"{sys_name}_{scenario}.json"
            if system_json.is_file():
                shutil.copyfile(system_json, res / "measurements.json")
                changes.append(f"{rel}/measurements/{scen}/{system_json.name} -> "
                               f"{rel}/results/{scen}/measurements.json")
            for name in MOVED_MEASUREMENTS:
                if (src / name).is_file():
                    shutil.copyfile(src / name, res / name)
                    changes.append(f"{rel}/measurements/{scen}/{name} -> {rel}/results/{scen}/{name}")
        for scen in _scenarios(org_dir / "compliance"):
            for test in sorted(p for p in (org_dir / "compliance" / scen).iterdir()
                               if p.is_dir() and not p.is_symlink()):
                target = dst / "results" / scen / test.name
                shutil.copytree(test, target, symlinks=True)
                changes.append(f"{rel}/compliance/{scen}/{test.name} -> {rel}/results/{scen}/{test.name}")
    (out / "relayout.txt").write_text("".join(f"{c}\n" for c in changes))
    return changes
