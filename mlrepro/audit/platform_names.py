"""What a log's ``submission_platform`` and ``submission_org`` say, read as reviewers read them.

Submitters write these strings by hand or leave what their vendor's logging code writes: NVIDIA's
``<nodes>x<platform>`` (``9xNVIDIA DGX A100``), a display name beside the folder name (``PRIMERGY GX2460 M1`` for
``PRIMERGY-GX2460M1-mxnet``), a platform that encodes its accelerators (``DSS8440x10A100-PCIE-80GB``: ten A100s),
or the code's own placeholder (``SUBMISSION_PLATFORM_PLACEHOLDER``). :func:`parse` takes such a string apart;
:class:`Names` holds what the audited round says of each system, so that a string naming another system of the
same organisation, or another organisation's system, can be told from a cosmetic variant of the system's own name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Accelerator families as platform and model names spell them. Only whole tokens count (``NF5488A5`` holds no
# accelerator ``A5``): a family is taken where no letter or digit touches it, or where a count encodes it
# (``x10A100``, ``4xA100``).
_FAMILY = (r"(?:GB[23]00|GH200|[ABH]100|[BH]200|B300|H800|H20|A800|A30|A40|A10|V100|P100|T4|L40S?|L4|"
           r"MI\d{3}[A-Z]?|Gaudi\d?|TPU-?v\d+[a-z]?|GC200|IPU)")
_STANDALONE = re.compile(rf"(?<![0-9A-Za-z]){_FAMILY}(?![0-9A-Za-z])", re.IGNORECASE)
# "4xA100", "4 x A100": a count before the family; "x10A100" (DSS8440x10A100): a count after an "x"
_COUNT_BEFORE = re.compile(rf"(?<![0-9A-Za-z])(\d+)\s*[x×]\s*({_FAMILY})(?![a-z])", re.IGNORECASE)
_COUNT_AFTER_X = re.compile(rf"[x×](\d+)\s*({_FAMILY})(?![a-z])", re.IGNORECASE)
# NVIDIA's "<nodes>x<platform>"
_NODE_PREFIX = re.compile(r"^\s*(\d+)\s*[x×]\s*(?=\S)", re.IGNORECASE)
PLACEHOLDER = re.compile(r"placeholder", re.IGNORECASE)
_MIN_PART = 4  # a shorter string inside a name is no evidence that it is that name


SHOWN = 100  # characters of a logged string that a finding quotes (a log may hold megabytes in one value)


def shown(value: Any) -> str:
    """A logged value as a finding quotes it: its repr, cut to SHOWN characters."""
    text = repr(value if isinstance(value, str) else str(value))
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}... ({len(text)} characters)"


def norm(text: Any) -> str:
    """``text`` without case, spaces and punctuation: how two spellings of one name compare."""
    return re.sub(r"[^0-9a-z]+", "", str(text).lower())


def families(text: Any) -> set[str]:
    """The accelerator families that ``text`` names as whole tokens or with a count, in one spelling."""
    s = str(text)
    found = {m.group(0) for m in _STANDALONE.finditer(s)}
    found |= {m.group(2) for m in _COUNT_BEFORE.finditer(s)} | {m.group(2) for m in _COUNT_AFTER_X.finditer(s)}
    return {norm(f) for f in found}


@dataclass(frozen=True)
class Platform:
    """A ``submission_platform`` taken apart."""

    text: str
    nodes: int | None  # the "<N>x" prefix, where the rest is no accelerator ("8xA100" is accelerators)
    rest: str  # the string without that prefix
    accelerators: dict[str, int] = field(default_factory=dict)  # family -> the count encoded beside it
    families: frozenset[str] = frozenset()
    placeholder: bool = False


def parse(text: Any) -> Platform:
    s = str(text)
    nodes = None
    rest = s
    m = _NODE_PREFIX.match(s)
    if m and not re.match(_FAMILY, s[m.end():], re.IGNORECASE):
        nodes, rest = int(m.group(1)), s[m.end():]
    counts: dict[str, int] = {}
    for pattern in (_COUNT_BEFORE, _COUNT_AFTER_X):
        for c in pattern.finditer(rest):
            counts.setdefault(norm(c.group(2)), int(c.group(1)))
    return Platform(s, nodes, rest.strip(), counts, frozenset(families(rest)), bool(PLACEHOLDER.search(s)))


@dataclass(frozen=True)
class System:
    """One system of the audited round as its folder and description name it."""

    org: str
    folder: str
    name: str  # the description's system_name ("" where it has none)
    nodes: float | None
    accelerators: float | None  # per node
    model: str

    @classmethod
    def from_desc(cls, org: str, folder: str, desc: dict[str, Any]) -> System:
        return cls(org, folder, str(desc.get("system_name") or ""), count(desc.get("number_of_nodes")),
                   count(desc.get("accelerators_per_node")), str(desc.get("accelerator_model_name") or ""))

    def spellings(self) -> set[str]:
        """The folder and the description's name, each also without its own "<N>x" prefix."""
        out = set()
        for text in (self.folder, self.name):
            if text:
                out |= {norm(text), norm(parse(text).rest)}
        return out - {""}

    def shape(self) -> str:
        nodes = "?" if self.nodes is None else f"{self.nodes:g}"
        acc = "?" if self.accelerators is None else f"{self.accelerators:g}"
        return f"{nodes} node(s) of {acc} {self.model or 'accelerators'}"


def count(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def same_name(a: str, b: str) -> bool:
    """Two normalised names that one part of the other spells (a display name beside a folder name)."""
    return a == b or (min(len(a), len(b)) >= _MIN_PART and (a in b or b in a))


def same_org(logged: Any, *names: Any) -> bool:
    """An organisation's name as a log spells it (``Habana`` for ``Intel-HabanaLabs``, ``nvidia``) against its
    names in the package: equal but for case and punctuation, or one a part of the other (or of one of the
    folder's parts)."""
    want = norm(logged)
    if not want:
        return True
    parts = {p for n in names if n for p in name_parts(n)}
    return any(want == p or (min(len(want), len(p)) >= 3 and (want in p or p in want)) for p in parts)


@dataclass
class Names:
    """What the audited round says of each system: the systems by organisation, and which organisations' logs
    spell each platform (without its node prefix)."""

    systems: dict[str, list[System]] = field(default_factory=dict)
    logged_by: dict[str, set[str]] = field(default_factory=dict)  # normalised platform -> organisations

    def add_system(self, system: System) -> None:
        self.systems.setdefault(system.org, []).append(system)

    def add_logged(self, org: str, platforms: Iterable[Any]) -> None:
        for p in platforms:
            key = norm(parse(p).rest)
            if key and not PLACEHOLDER.search(str(p)):
                self.logged_by.setdefault(key, set()).add(org)

    def other_system(self, own: System, key: str) -> System | None:
        """The organisation's other system whose folder or name ``key`` spells exactly."""
        for s in self.systems.get(own.org, []):
            if s.folder != own.folder and key in s.spellings() and key not in own.spellings():
                return s
        return None

    def other_org(self, own: System, key: str) -> str | None:
        """Another organisation whose logs or systems spell ``key`` and whose name is in it (NVIDIA for
        "NVIDIA DGX A100" in GIGABYTE's logs; not GIGABYTE for the same string in NVIDIA's): its name."""
        if _named(own.org, key):
            return None
        spelt = self.logged_by.get(key, set()) | {o for o, systems in self.systems.items()
                                                   if any(key in s.spellings() for s in systems)}
        return next((o for o in sorted(spelt - {own.org}) if _named(o, key)), None)


def _named(org: str, key: str) -> bool:
    """Whether the normalised ``key`` holds the organisation's name or one of its parts (Intel-HabanaLabs:
    "habanalabs")."""
    return any(len(part) >= 3 and part in key for part in name_parts(org))


def name_parts(name: Any) -> set[str]:
    """A name, normalised, and each of its parts split at ``-``, ``_``, ``/`` and spaces (``Intel-HabanaLabs``:
    the whole, "intel" and "habanalabs"); empty parts left out."""
    return {norm(p) for p in [name, *re.split(r"[-_\s/]+", str(name))]} - {""}
