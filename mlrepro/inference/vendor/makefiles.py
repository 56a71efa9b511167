"""A vendor folder's Makefiles as text: which files (``Makefile`` and what it includes), each target's prerequisites
and recipe lines, and which targets a recipe runs through ``$(MAKE)``. Read, never run: nothing here executes make
or expands a variable, so a hostile folder cannot act while the pipeline plans.

GNU make's grammar only as far as NVIDIA's Makefiles use it (every round): ``include``, ``VAR := / ?= / = / +=``
(``export``/``override`` prefixes), ``target: prerequisites`` with tab-indented recipe lines and backslash
continuations, and conditional directives (``ifeq`` ... ``endif``), whose branches are all kept: the recipe a
target can run is what the flow needs, not the branch this machine would take.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mlrepro.core import safe_read
from mlrepro.core.errors import MlreproError

MAX_BYTES = 4 << 20  # NVIDIA's largest Makefile is ~20 KB
INCLUDE = re.compile(r"^-?include\s+(.+?)\s*$")
ASSIGN = re.compile(r"^(?:(?:export|override)\s+)*([A-Za-z_][A-Za-z0-9_.-]*)\s*(:=|::=|\?=|\+=|!=|=)\s*(.*)$")
RULE = re.compile(r"^([^:=#\t][^:=#]*?)\s*:(?!=)\s*([^=]*)$")
DIRECTIVE = re.compile(r"^\s*(ifeq|ifneq|ifdef|ifndef|else|endif|define|endef|undefine|vpath)\b")
SUBMAKE = re.compile(r"\$\(MAKE\)|\$\{MAKE\}|(?<![\w/.-])make(?=\s+-f\s)")


class MakefileError(MlreproError, ValueError):
    """A vendor folder whose Makefiles cannot be read."""


@dataclass(frozen=True)
class Rule:
    target: str
    prerequisites: tuple[str, ...]
    recipe: tuple[str, ...]  # logical lines, continuations joined, leading tab and '@'/'-' kept off
    file: str  # the Makefile (relative to the folder) that defines it


@dataclass(frozen=True)
class Makefiles:
    folder: Path
    files: tuple[str, ...]  # in the order make reads them, each once
    rules: dict[str, Rule]
    variables: dict[str, str]  # the last assignment's raw text per name

    @classmethod
    def read(cls, folder: Path, root: str = "Makefile") -> Makefiles:
        folder = folder.resolve()
        files: list[str] = []
        rules: dict[str, Rule] = {}
        variables: dict[str, str] = {}
        _read(folder, root, files, rules, variables)
        return cls(folder, tuple(files), rules, variables)

    def has(self, target: str) -> bool:
        return target in self.rules

    def sub_makes(self, target: str) -> list[str]:
        """The targets ``target``'s recipe runs through ``$(MAKE)`` (or ``make -f``), in order."""
        found: list[str] = []
        for line in self.rules[target].recipe if target in self.rules else ():
            for m in SUBMAKE.finditer(line):
                found += _make_targets(line[m.end():])
        return found

    def expanded(self, target: str) -> list[str]:
        """``target``'s recipe lines and, in their place, those of the targets it runs through ``$(MAKE)``; each
        target once (the retries' loops name the same target again)."""
        seen: set[str] = set()
        out: list[str] = []

        def walk(t: str) -> None:
            if t in seen or t not in self.rules:
                return
            seen.add(t)
            for line in self.rules[t].recipe:
                out.append(line)
                for m in SUBMAKE.finditer(line):
                    for sub in _make_targets(line[m.end():]):
                        walk(sub)

        walk(target)
        return out


def _make_targets(rest: str) -> list[str]:
    """The target words of a make command line's arguments (flags, ``-f FILE`` and ``VAR=value`` left out), up to
    the end of that command (``&&``, ``||``, ``;``, ``|``)."""
    words = re.split(r"\s+", re.split(r"&&|\|\||;|\|", rest, maxsplit=1)[0].strip())
    targets, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w in ("-f", "-C", "--file", "--directory"):
            skip = True
        elif w and not w.startswith("-") and "=" not in w and "$" not in w and re.fullmatch(r"[\w.-]+", w):
            targets.append(w)
    return targets


def _logical_lines(text: str) -> list[str]:
    """The file's lines with backslash continuations joined (a recipe line keeps its leading tab)."""
    out: list[str] = []
    buf = ""
    for raw in text.splitlines():
        if raw.endswith("\\"):
            buf += raw[:-1] + " "
            continue
        out.append(buf + raw if not buf else buf + raw.lstrip("\t"))
        buf = ""
    if buf:
        out.append(buf)
    return out


def _include_path(folder: Path, spec: str, where: str) -> list[str]:
    names = []
    for word in spec.split():
        word = word.replace("$(CURDIR)/", "").replace("${CURDIR}/", "")
        if "$" in word:
            raise MakefileError(f"{where}: include {word!r} names a variable this reader does not expand; "
                                "include the file by its name relative to the folder")
        path = (folder / word).resolve()
        if not path.is_relative_to(folder):
            raise MakefileError(f"{where}: include {word!r} lies outside the code folder {folder}")
        names.append(str(path.relative_to(folder)))
    return names


def _read(folder: Path, name: str, files: list[str], rules: dict[str, Rule], variables: dict[str, str]) -> None:
    if name in files:
        return
    files.append(name)
    path = folder / name
    if path.is_symlink() or not path.is_file():
        raise MakefileError(f"{path}: not a regular file (a vendor folder's Makefiles are read as they are, "
                            "never through a link)")
    text = safe_read.read_text(path, folder, MAX_BYTES)
    current: list[str] | None = None
    header: tuple[list[str], tuple[str, ...]] | None = None

    def close() -> None:
        nonlocal current, header
        if header is not None and current is not None:
            targets, prereqs = header
            for t in targets:
                old = rules.get(t)
                if old is None or (not old.recipe and current):
                    rules[t] = Rule(t, prereqs if old is None else old.prerequisites + prereqs, tuple(current), name)
        current, header = None, None

    for line in _logical_lines(text):
        if line.startswith("\t") and current is not None:
            body = line[1:].strip()
            if body and not body.startswith("#"):
                current.append(body.lstrip("@-+ "))
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or DIRECTIVE.match(line):
            continue  # inside a recipe: the rule stays open (make allows blank lines and directives there)
        if m := INCLUDE.match(stripped):
            close()
            for inc in _include_path(folder, m.group(1), f"{path}"):
                _read(folder, inc, files, rules, variables)
            continue
        if m := ASSIGN.match(stripped):
            close()
            variables[m.group(1)] = m.group(3)
            continue
        if m := RULE.match(stripped):
            close()
            targets = [t for t in m.group(1).split() if t]
            if any(t.startswith(".") for t in targets):  # .PHONY and other special targets
                continue
            header = (targets, tuple(p for p in m.group(2).split(";")[0].split() if p))
            current = []
            continue
        close()
    close()
