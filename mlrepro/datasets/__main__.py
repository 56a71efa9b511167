"""``python -m mlrepro.datasets STEP ...``: the recipe steps the rules run, and ``verify`` (verify_data)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from mlrepro.datasets import fetch, stamps, steps
from mlrepro.datasets import recipe as _recipe


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlrepro.datasets", description=__doc__)
    sub = p.add_subparsers(dest="step", required=True)
    for step in ("download", "verify", "extract", "prepare"):
        s = sub.add_parser(step)
        s.add_argument("--benchmark", required=True)
        s.add_argument("--recipe", type=Path, required=True)
        s.add_argument("--root", type=Path, required=True, help="<data_root>/<benchmark>")
        s.add_argument("--receipt", type=Path, required=True)
        if step in ("extract", "prepare"):
            s.add_argument("--trust-group", default="", help="the config's data_group: its members' folders are reused")
        if step == "prepare":  # the implementation's own scripts, in its image (the recipe's prepare.image)
            s.add_argument("--engine", default="native")
            s.add_argument("--engine-socket", default=None)
            s.add_argument("--image-record", type=Path, default=None)
            s.add_argument("--locked", action="store_true")
    s = sub.add_parser("adopt", help="verify an already prepared folder (data: {path: DIR})")
    s.add_argument("--folder", type=Path, required=True)
    s.add_argument("--receipt", type=Path, required=True)
    s = sub.add_parser("verify-data", help="hash every file of the datasets' receipts in parallel (verify_data)")
    s.add_argument("receipts", type=Path, nargs="*")
    s.add_argument("--jobs", type=int, default=1)
    args = p.parse_args(argv)

    if args.step == "adopt":
        steps.adopt(args.folder.resolve(), args.receipt)
        return 0
    if args.step == "verify-data":
        return verify(args.receipts, args.jobs)
    recipe = _recipe.load(args.benchmark, args.recipe)
    root = args.root.resolve()
    if args.step == "download":
        steps.download(recipe, root, args.receipt)
    elif args.step == "verify":
        steps.verify(recipe, root, args.receipt)
    elif args.step == "extract":
        steps.extract(recipe, root, args.receipt, steps.group_id(args.trust_group))
    else:
        runner = image_runner(args, root / "prepare.log") if args.image_record else None
        steps.prepare_step(recipe, root, args.receipt, runner, steps.group_id(args.trust_group))
    return 0


def image_runner(args: argparse.Namespace, log: Path) -> Callable[[dict, Path, Path, Path], None]:
    """Run the recipe's ``prepare.image.command`` in the implementation's image: the sources read-only."""
    from mlrepro.containers.lock import image_ref
    from mlrepro.engines import Mount, get_engine

    engine = get_engine(args.engine, socket=args.engine_socket)
    image = image_ref(args.image_record, locked=args.locked)

    def run(spec: dict, extracted: Path, downloads: Path, out: Path) -> None:
        argv = [str(a).format(extracted=extracted, downloads=downloads, prepared=out) for a in spec["command"]]
        mounts = [Mount(extracted, read_only=True), Mount(downloads, read_only=True), Mount(out, read_only=False)]
        code = engine.run(argv, image=image, mounts=mounts, gpus=False, env={}, log=log)
        if code:
            raise RuntimeError(f"{args.benchmark}: {' '.join(argv)} in image {image} exited with {code}; see {log}")

    return run


def verify(receipts: list[Path], jobs: int) -> int:
    """Hash every file the receipts name; refresh the stamps of folders that match; name every mismatch."""
    import time

    present = [r for r in receipts if r.is_file()]
    folders = [Path(stamps.read_receipt(r)["folder"]) for r in present]
    start = time.monotonic()
    problems, total = stamps.verify_folders(folders, jobs=jobs)
    seconds = time.monotonic() - start
    print(f"verify_data: hashed {total / 1e9:.3f} GB in {len(folders)} folders in {seconds:.2f} s "
          f"({total / 1e6 / max(seconds, 1e-9):.0f} MB/s, {jobs} threads)")
    bad = {p.file.parent for p in problems}
    for receipt, folder in zip(present, folders, strict=True):
        if not any(folder == b or folder in b.parents for b in bad):
            extra = {k: v for k, v in stamps.read_receipt(receipt).items() if k not in ("folder", "stamps")}
            stamps.write_receipt(receipt, folder, **extra)  # intact: later starts compare with today's stamps
    for problem in problems:
        print(f"MISMATCH {problem}", file=sys.stderr)
    if problems:
        print(f"verify_data: {len(problems)} files do not match their manifests", file=sys.stderr)
        return 1
    print("verify_data: every file matches its manifest")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except fetch.DatasetError as e:  # a message naming file and what to do, not a traceback
        sys.exit(f"error: {e}")
