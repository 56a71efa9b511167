"""The official MLPerf result IDs ("2.0-2098"): derived from the round's system JSONs, or read from a
published table the auditor supplies, which then wins and is checked against the derived ones.

The rule (issue 28) was measured on the public v2.0 round: one ID per ``<org>/systems/<system>.json``
(none skipped, whatever its checks say), closed division first, numbered from ``<round>-2000`` in
the order of the keys of :data:`RULE`. A system JSON that cannot be read, or lacks a key, still gets
its ID; the missing key sorts after every present one and the entry's notes say so.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.audit.discover import DEFAULT_MAX_FILE_MB, EntryRejected, Org, read_entry, system_json_paths
from mlrepro.audit.summary import CATEGORIES, category, nodes
from mlrepro.core.errors import MlreproError

FIRST_NUMBER = 2000
DIVISIONS = ("closed", "open")

# What the report says, so that an auditor can tell an assigned ID from a published one.
RULE = (
    "one ID per system JSON (<org>/systems/<system>.json), none skipped, whatever its checks say",
    "closed division first, then open, then any other division",
    "numbered from <round>-2000 upwards in this order:",
    "1. availability category: Available cloud (status cloud), Available on-premise (onprem, available, ...), "
    "Preview, Research, Development, or Internal",
    "2. submitter, ignoring case",
    "3. accelerator_model_name, ignoring case",
    "4. total accelerators (number_of_nodes x accelerators_per_node) as a number, smallest first",
    "5. system_name, ignoring case",
    "6. framework, ignoring case",
    "a missing or unreadable key sorts after every present one",
)
UNCERTAINTIES = (
    "The rule was measured on v2.0 only, where the 14 distinct rows that NVIDIA's results page cites by ID "
    "(2.0-2060 to 2.0-2107) get exactly those IDs; other rounds may number differently (older rounds used "
    "other forms, such as 0.7-56).",
    # v2.0: were 'available' cloud, the 17 rows of Intel-HabanaLabs, Lenovo and Nettrix would move ahead and
    # five cited IDs (2.0-2060 to 2.0-2070) would shift; Google's four rows precede every cited one either way
    "Status 'available' is on-premise (v2.0's cited IDs require it of Intel-HabanaLabs, Lenovo and Nettrix); "
    "whether Google's 'available' TPU rows count as cloud instead is unknown.",
    "The order inside ties these keys leave is unknown (v1.1 and v2.0 have none); here: organisation folder, "
    "then JSON file name.",
    "That the open division continues after the closed one is presumed.",
)
_MAX_TABLE_BYTES = 16 << 20  # a round's table is a few kB; never read a huge file whole
_MAX_ID_CHARS = 64


def round_prefix(ruleset: str) -> str:
    """The round's number as the IDs carry it: "2.0" for the ruleset "2.0.0"."""
    return ".".join(ruleset.split(".")[:2])


@dataclass(frozen=True)
class SystemKeys:
    """The keys that place one system JSON in the published table."""

    org: str  # the organisation's folder
    system: str  # the JSON's file name without .json
    division: str = ""
    status: str = ""
    category: str = ""
    submitter: str = ""
    accelerator_model_name: str = ""
    accelerators: float | None = None  # number_of_nodes x accelerators_per_node
    system_name: str = ""
    framework: str = ""
    problems: tuple[str, ...] = ()

    def order(self) -> tuple[Any, ...]:
        division = self.division.casefold()
        cat = CATEGORIES.index(self.category) if self.category in CATEGORIES else len(CATEGORIES)
        texts = (self.submitter, self.accelerator_model_name)
        return (DIVISIONS.index(division) if division in DIVISIONS else len(DIVISIONS), division, cat,
                *_text_order(*texts), self.accelerators is None, self.accelerators or 0.0,
                *_text_order(self.system_name, self.framework),
                self.org.casefold(), self.system.casefold(), self.org, self.system)


def _text_order(*texts: str) -> list[tuple[bool, str]]:
    # a missing key ("") after every present one
    return [(not t, t.casefold()) for t in texts]


def _text(desc: dict[str, Any], key: str, problems: list[str]) -> str:
    value = desc.get(key)
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    problems.append(f"{key} is missing" if value is None or value == "" else
                    f"{key} is not text ({type(value).__name__})")
    return ""


def _count(desc: dict[str, Any], key: str, problems: list[str]) -> float | None:
    value = desc.get(key)
    number = None if isinstance(value, bool) else nodes(value)  # "8", 8 and 8.0 alike
    if number is None or number < 0:
        problems.append(f"{key} is missing" if value is None else f"{key} is not a count ({str(value)[:40]!r})")
        return None
    return number


def read_keys(org: Org, path: Path, root: Path, max_bytes: int | None = DEFAULT_MAX_FILE_MB << 20) -> SystemKeys:
    """The sort keys of one system JSON; what cannot be read is named in ``problems``, never raised."""
    problems: list[str] = []
    where = f"systems/{path.name}"
    try:
        desc = json.loads(read_entry(path, root, max_bytes).decode("utf-8"))
    except EntryRejected as e:
        return SystemKeys(org.name, path.stem, problems=(f"{where}: {e}",))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        return SystemKeys(org.name, path.stem, problems=(f"{where} is unreadable ({type(e).__name__}); "
                                                         "every key sorts as missing",))
    if not isinstance(desc, dict):
        return SystemKeys(org.name, path.stem, problems=(f"{where} is not a JSON object; every key sorts as missing",))
    division = _text(desc, "division", problems)
    if division and division.casefold() not in DIVISIONS:
        problems.append(f"division {division[:40]!r} is neither closed nor open: numbered after both")
    status = _text(desc, "status", problems)
    cat = category(status)
    if status and not cat:
        problems.append(f"status {status[:40]!r} is no known availability category: sorted after them")
    node_count = _count(desc, "number_of_nodes", problems)
    per_node = _count(desc, "accelerators_per_node", problems)
    total = None if node_count is None or per_node is None else node_count * per_node
    return SystemKeys(org.name, path.stem, division, status, cat, _text(desc, "submitter", problems),
                      _text(desc, "accelerator_model_name", problems), total if total is None or math.isfinite(total)
                      else None, _text(desc, "system_name", problems), _text(desc, "framework", problems),
                      tuple(f"{where}: {p}" for p in problems))


@dataclass
class ResultId:
    """One row of the round's table: the ID it carries and how the audit knows it."""

    keys: SystemKeys
    derived: str
    published: str | None = None  # from the supplied table; None: not in it (or no table)
    notes: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.published or self.derived

    @property
    def source(self) -> str:
        return "published" if self.published else "derived"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "derived": self.derived, "published": self.published,
                "notes": self.notes, "keys": {k: v for k, v in self.keys.__dict__.items() if k != "problems"},
                "problems": list(self.keys.problems)}


class PublishedTableError(MlreproError, ValueError):
    """A supplied table that cannot be used; the message names the file, the line and what to do."""


def read_published(path: Path) -> dict[tuple[str, str], str]:
    """(org, system) -> ID of a published table: a CSV with the columns org, system, id."""
    hint = "give a CSV with the header org,system,id and one row per system JSON"
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_TABLE_BYTES + 1)
        text = data.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise PublishedTableError(f"audit_result_ids={path}: cannot be read ({e}); {hint}") from None
    if len(data) > _MAX_TABLE_BYTES:
        raise PublishedTableError(f"audit_result_ids={path}: larger than {_MAX_TABLE_BYTES} bytes; {hint}")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip().casefold() for h in next(reader, [])]
        missing = [c for c in ("org", "system", "id") if c not in header]
        if missing:
            raise PublishedTableError(f"audit_result_ids={path}: no column {', '.join(missing)} in the header "
                                      f"{','.join(header)[:200]!r}; {hint}")
        at = [header.index(c) for c in ("org", "system", "id")]
        table: dict[tuple[str, str], str] = {}
        owner: dict[str, str] = {}
        for cells in reader:
            if any(c.strip() for c in cells):
                org, system, rid = (cells[i].strip() if i < len(cells) else "" for i in at)
                _check_row(f"audit_result_ids={path}, line {reader.line_num}", org, system, rid, table, owner)
                table[org, system] = rid
                owner[rid] = f"{org}/{system}"
    except csv.Error as e:  # a field over csv's size limit, a NUL, ...
        raise PublishedTableError(f"audit_result_ids={path}, line {reader.line_num}: not CSV ({e}); {hint}") from None
    return table


def _check_row(where: str, org: str, system: str, rid: str, table: dict[tuple[str, str], str],
               owner: dict[str, str]) -> None:
    """Raise PublishedTableError naming the line where a row of a published table is unusable."""
    if not (org and system and rid):
        raise PublishedTableError(f"{where}: org, system and id must all be given")
    if len(rid) > _MAX_ID_CHARS or not rid.isprintable():
        raise PublishedTableError(f"{where}: {rid[:_MAX_ID_CHARS]!r} is no result ID (such as 2.0-2098)")
    name = f"{org}/{system}"
    if (org, system) in table:
        raise PublishedTableError(f"{where}: {name[:200]} is listed twice; keep one row per system")
    if rid in owner:
        raise PublishedTableError(f"{where}: ID {rid} is also given to {owner[rid][:200]}; an ID names one row")


@dataclass
class IdTable:
    """Every system JSON of the round with its ID, in the table's order."""

    round: str
    entries: list[ResultId]
    published_table: str | None = None  # the supplied table's file name
    disagreements: list[str] = field(default_factory=list)
    not_in_package: list[str] = field(default_factory=list)  # rows of the table without a system JSON here

    def by_system(self) -> dict[tuple[str, str], ResultId]:
        return {(e.keys.org, e.keys.system): e for e in self.entries}

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "rule": list(RULE), "uncertainties": list(UNCERTAINTIES),
                "published_table": self.published_table, "disagreements": self.disagreements,
                "not_in_package": self.not_in_package, "entries": [e.to_dict() for e in self.entries]}


def derive(keys: list[SystemKeys], ruleset: str) -> list[ResultId]:
    """The IDs by the rule, in the table's order."""
    prefix = round_prefix(ruleset)
    ordered = sorted(keys, key=SystemKeys.order)
    return [ResultId(k, f"{prefix}-{FIRST_NUMBER + i}") for i, k in enumerate(ordered)]


def apply_published(entries: list[ResultId], table: dict[tuple[str, str], str]) -> tuple[list[str], list[str]]:
    """Give each entry its published ID; (disagreements with the derived IDs, table rows not in the package)."""
    disagreements = []
    published_owner = {rid: key for key, rid in table.items()}
    for e in entries:
        key = (e.keys.org, e.keys.system)
        e.published = table.get(key)
        name = "/".join(key)
        if e.published is None:
            e.notes.append("not in the published table: the derived ID is shown")
            if (other := published_owner.get(e.derived)) is not None:
                disagreements.append(f"{name}: its derived ID {e.derived} is the published ID of {'/'.join(other)}")
        elif e.published != e.derived:
            disagreements.append(f"{name}: published {e.published}, derived {e.derived}")
            e.notes.append(f"the rule derives {e.derived}")
    present = {(e.keys.org, e.keys.system) for e in entries}
    missing = [f"{org}/{system}: {rid}" for (org, system), rid in table.items() if (org, system) not in present]
    return disagreements, missing


def assign(orgs: list[Org], root: Path, ruleset: str, published: Path | None = None,
           max_bytes: int | None = DEFAULT_MAX_FILE_MB << 20) -> IdTable:
    """The round's IDs; with ``published`` (a table org,system,id) its IDs win and are checked."""
    table = read_published(published) if published is not None else None
    entries = derive([read_keys(org, p, root, max_bytes) for org in orgs for p in system_json_paths(org.path)], ruleset)
    for e in entries:
        e.notes.extend(e.keys.problems)
    out = IdTable(round_prefix(ruleset), entries)
    if published is not None and table is not None:
        out.published_table = published.name
        out.disagreements, out.not_in_package = apply_published(entries, table)
    return out
