"""Downloads through pooch (known hashes, retries, a progress bar) with a downloader that resumes.

pooch streams into a temporary file and moves it into place only when its hash matches; the downloader
keeps the bytes received so far in ``.<file>.partial`` and continues from there with an HTTP Range
request, so an interrupted download (a dropped connection, a killed job) resumes instead of restarting.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from mlrepro.core.errors import MlreproError
from mlrepro.datasets.recipe import Recipe, Source

RECORDED = "recorded-checksums.sha256"


class DatasetError(MlreproError, RuntimeError):
    pass


class ResumingDownloader:
    """A pooch downloader (``downloader(url, output_file, pooch)``) that resumes from a partial file."""

    def __init__(self, partial: Path, progressbar: bool = True, timeout: float = 60) -> None:
        self.partial = partial
        self.progressbar = progressbar
        self.timeout = timeout

    def __call__(self, url: str, output_file: str, pooch: Any, check_only: bool = False) -> bool | None:
        import requests
        from tqdm import tqdm

        have = self.partial.stat().st_size if self.partial.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        with requests.get(url, headers=headers, stream=True, timeout=self.timeout) as response:
            if have and response.status_code == 416:  # the partial file is already complete
                pass
            else:
                response.raise_for_status()
                if have and response.status_code != 206:  # the server ignored the Range: start over
                    have = 0
                total = int(response.headers.get("content-length", 0)) + have
                with self.partial.open("ab" if have else "wb") as out, tqdm(
                        total=total or None, initial=have, unit="B", unit_scale=True, desc=self.partial.name[1:-8],
                        disable=not self.progressbar) as bar:
                    for chunk in response.iter_content(chunk_size=1 << 16):  # a cut loses at most one chunk
                        out.write(chunk)
                        bar.update(len(chunk))
        os.replace(self.partial, output_file)  # pooch checks the hash, then moves it into place
        return None


def _recorded(root: Path) -> dict[str, str]:
    path = root / RECORDED
    if not path.is_file():
        return {}
    return {name: digest for digest, _, name in (line.partition("  ") for line in path.read_text().splitlines())}


def known_hash(root: Path, source: Source) -> str | None:
    """The published checksum, else the sha256 recorded at the first download, else None."""
    if source.hash:
        return source.hash
    recorded = _recorded(root).get(source.file)
    return f"sha256:{recorded}" if recorded else None


def record(root: Path, name: str, sha256: str) -> None:
    """Record the first copy's sha256 of a source that publishes none; later copies must match it."""
    from mlrepro.core import atomic
    entries = {**_recorded(root), name: sha256}
    atomic.write_text(root / RECORDED, "".join(f"{d}  {n}\n" for n, d in sorted(entries.items())))


def check_free_space(folder: Path, needed: int, what: str, recipe: Recipe) -> None:
    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise DatasetError(
            f"not enough free space for {recipe.benchmark} {what} in {folder}: it needs {needed / 1e9:.3g} GB "
            f"({recipe.path} sizes), {free / 1e9:.3g} GB are free. Free space there or point data_root at a "
            "larger disk.")


def manual_message(recipe: Recipe, downloads: Path) -> str | None:
    """One paragraph per manual file still missing from ``downloads``; None when all are in place."""
    missing = [s for s in recipe.manual if not (downloads / s.file).is_file()]
    if not missing:
        return None
    lines = [f"{recipe.benchmark} ({recipe.dataset}) needs files that must be downloaded by hand; put each into "
             f"{downloads}/ and start again:"]
    for s in missing:
        check = (f"its {s.hash.partition(':')[0]} must be {s.hash.partition(':')[2]}" if s.hash else
                 f"no checksum is published: its sha256 is recorded in {downloads.parent / RECORDED} when first "
                 "seen, and later copies must match it")
        manual = s.manual or {}
        lines.append(f"  - {downloads / s.file}: get it from {manual.get('from', '?')}"
                     + (f" ({manual['note']})" if manual.get("note") else "") + f"; {check}.")
    return "\n".join(lines)


def download(recipe: Recipe, root: Path, downloads: Path, retries: int = 2, progressbar: bool = True) -> list[Path]:
    """Fetch every source with a URL that is not yet in ``downloads``."""
    import pooch

    downloads.mkdir(parents=True, exist_ok=True)
    if message := manual_message(recipe, downloads):
        raise DatasetError(message)
    todo = [s for s in recipe.sources if s.url and not (downloads / s.file).is_file()]
    check_free_space(downloads, sum(s.size for s in todo), "download", recipe)
    fetched = []
    for source in recipe.sources:
        if source.url is None:
            fetched.append(downloads / source.file)
            continue
        target = downloads / source.file
        if target.is_file():  # the verify step hashes it; a wrong copy stops there, naming it
            fetched.append(target)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        registry = pooch.create(path=downloads, base_url="", registry={source.file: known_hash(root, source)},
                                urls={source.file: source.url}, retry_if_failed=retries, allow_updates=False)
        partial = target.with_name(f".{target.name}.partial")
        try:
            fetched.append(Path(registry.fetch(source.file, downloader=ResumingDownloader(partial, progressbar))))
        except ValueError as e:  # pooch's checksum mismatch: it has deleted the download already
            raise DatasetError(f"{target} (from {source.url}): {e}") from None
    return fetched
