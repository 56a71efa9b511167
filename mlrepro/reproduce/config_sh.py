"""A package's ``config_<SYSTEM>.sh`` read as text, without a shell: the job shape the plan needs.

Reproduce mode plans (at Snakefile parse time) from an untrusted package: sourcing its config file there
would run whatever it holds (``$(touch x)``) while the DAG is built, even under ``-n``. The plan needs the
job shape only (DGXNNODES, DGXNGPU, WALLTIME), which config files give as plain assignments; this reads the
assignments it understands and evaluates nothing else. Understood: ``[export] NAME=WORD`` where the word is
literal text, quoted or not, with ``$NAME``, ``${NAME}``, ``${NAME:-default}`` and integer ``$(( ))``
arithmetic over known names; ``source $(dirname ${BASH_SOURCE[0]})/FILE`` (or ``${BASH_SOURCE%/*}/FILE``) of
a file in the same folder. A name whose value holds anything else (a command substitution) becomes unknown.
The whole environment is captured later by bash, inside a job, from the staged copy
(mlrepro/reproduce/launch.py), which checks it against this reading.
"""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path

from mlrepro.core import safe_read
from mlrepro.core.errors import MlreproError
from mlrepro.runs.implementation import CLEAN_ENV

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN = re.compile(rf"(?:export\s+)?({_NAME})=(.*)")
_SOURCE = re.compile(r"(?:source|\.)\s+\"?(?:\$\(\s*dirname\s+\"?\$\{BASH_SOURCE(?:\[0\])?\}\"?\s*\)|"
                     r"\$\{BASH_SOURCE%/\*\})/([\w.+-]+)\"?")
_EXPANSION = re.compile(rf"\$\(\((.*?)\)\)|\$\{{({_NAME})(?::-([^}}]*))?\}}|\$({_NAME})")
_MAX_BYTES = 1 << 20  # config files are a few kB
_MAX_SOURCES = 16  # files sourced from one config file, nested


class Unknown(MlreproError, ValueError):
    """A value this reader does not evaluate."""


def _value(env: dict[str, str | None], name: str) -> str:
    """A name's value; unset is empty, as in bash; a name assigned what this reader cannot evaluate is Unknown."""
    value = env.get(name, "")
    if value is None:
        raise Unknown(name)
    return value


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod}


def _arith(expr: str, env: dict[str, str | None]) -> int:
    """bash's integer arithmetic for + - * / %, integers and names (``$X``, ``${X}`` or ``X``)."""
    text = re.sub(rf"\$\{{({_NAME})(?::-([0-9]+))?\}}|\$({_NAME})",
                  lambda m: _value(env, m.group(1) or m.group(3)) or m.group(2) or "0", expr)
    text = re.sub(_NAME, lambda m: _value(env, m.group(0)) or "0", text)
    if not re.fullmatch(r"[\d\s+\-*/%()]*", text):
        raise Unknown(expr)

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return int(_OPS[type(node.op)](value(node.left), value(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise Unknown(expr)

    try:
        return value(ast.parse(text.replace("/", "//").strip(), mode="eval").body)
    except (SyntaxError, ZeroDivisionError, RecursionError):
        raise Unknown(expr) from None


def _expand(text: str, env: dict[str, str | None]) -> str:
    if "`" in text or re.search(r"\$\((?!\()", text):
        raise Unknown(text)  # a command substitution: only a shell knows its value

    def one(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return str(_arith(m.group(1), env))
        value = _value(env, m.group(2) or m.group(4))
        default = m.group(3)
        return value or (default.strip("\"'") if default is not None else "")

    out = _EXPANSION.sub(one, text)
    if "$" in out:
        raise Unknown(text)
    return out


def _word(raw: str, env: dict[str, str | None]) -> str:
    """The value of a shell word (up to unquoted whitespace, ``;`` or ``#``)."""
    out, i = [], 0
    while i < len(raw):
        c = raw[i]
        if c == "'":
            end = raw.index("'", i + 1)
            out.append(raw[i + 1:end])
            i = end + 1
        elif c == '"':
            end = i + 1
            while raw[end] != '"':
                end += 2 if raw[end] == "\\" else 1
            out.append(_expand(re.sub(r"\\([\"\\$`])", r"\1", raw[i + 1:end]), env))
            i = end + 1
        elif c.isspace() or c in ";#":
            break
        elif c in "|&<>()" and not raw[i:].startswith("$(("):
            raise Unknown(raw)
        else:
            m = re.match(r"\$\(\(.*?\)\)|\$\{[^}]*\}|[^'\"\s;#|&<>()]+", raw[i:])
            if m is None:
                raise Unknown(raw)
            out.append(_expand(m.group(0), env))
            i += m.end()
    return "".join(out)


def read(config: Path, root: Path) -> dict[str, str]:
    """The names ``config`` assigns that this reader can evaluate; files it sources must lie in its folder
    (and inside ``root``); read with bounds (mlrepro.core.safe_read)."""
    env: dict[str, str | None] = dict(CLEAN_ENV)  # bash sources it in this environment (capture)
    _read(config, root, env, [0])
    return {k: v for k, v in env.items() if v is not None and CLEAN_ENV.get(k) != v}


def _read(config: Path, root: Path, env: dict[str, str | None], sourced: list[int]) -> None:
    text = safe_read.read_text(config, root, _MAX_BYTES)
    for line in re.sub(r"\\\n", "", text).splitlines():
        line = line.strip()
        if m := _SOURCE.fullmatch(line.split(" #")[0].strip()):
            sourced[0] += 1
            if sourced[0] <= _MAX_SOURCES and (config.parent / m.group(1)).is_file():
                _read(config.parent / m.group(1), root, env, sourced)
        elif m := _ASSIGN.fullmatch(line):
            try:
                env[m.group(1)] = _word(m.group(2), env)
            except (ValueError, IndexError):  # Unknown; ValueError, IndexError: an unclosed quote
                env[m.group(1)] = None
