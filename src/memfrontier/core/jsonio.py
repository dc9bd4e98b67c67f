"""Atomic, strict JSON writing for result files."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from .files import FILE_MODE


def json_safe(obj):
    """Strict-JSON copy: NaN -> None, +/-inf -> "inf"/"-inf" (a free system's QPC is inf)."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to a temp file and rename it over ``path`` (readers never see a torn
    file). The file is 0600 whatever the umask (:mod:`memfrontier.core.files`)."""
    tmp = Path(path).with_suffix(Path(path).suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)  # a temp file left by a crash keeps its old mode otherwise
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path, obj) -> None:
    """Write strict JSON atomically (see :func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(json_safe(obj), indent=2, ensure_ascii=False, default=str, allow_nan=False))


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL text: split on ``"\\n"`` only (a ``"\\r"`` before it dropped), never on the
    other characters :meth:`str.splitlines` breaks at (U+2028, U+2029, U+0085, ``\\x1c``-``\\x1e``...),
    which JSON strings may hold unescaped. The one line reading of every JSONL file memfrontier reads.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_jsonl_objects(path: Path, error: type[Exception] = ValueError) -> list[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSONL file (1-based numbers).

    Raises ``error("<path>:<line>: ...")`` for a line that is not JSON or not a JSON object, and
    ``error`` for an unreadable file (FileNotFoundError when it does not exist).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        lines = jsonl_lines(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"cannot read {path}: {e}") from e
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{path}:{n}: not JSON ({e})") from None
        if not isinstance(obj, dict):
            raise error(f"{path}:{n}: each line must be a JSON object")
        out.append((n, obj))
    return out
