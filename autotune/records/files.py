"""JSON-lines files of any kind: opened as text (gzip by name or by content), parsed by line."""
from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import IO, Any, Iterator, Union

PathLike = Union[str, Path]
_GZIP_MAGIC = b"\x1f\x8b"


def open_text(path: PathLike, mode: str) -> IO[str]:
    """Open ``path`` as UTF-8 text; gzip when writing a ``.gz`` name or reading gzip bytes."""
    path = Path(path)
    if mode == "w":
        if path.suffix == ".gz":
            return gzip.open(path, "wt", encoding="utf-8")
        return open(path, "w", encoding="utf-8")
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == _GZIP_MAGIC
    if gzipped:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, "r", encoding="utf-8")


def parse_lines(fp: IO[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line; ValueError names a bad line."""
    for number, line in enumerate(fp, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"line {number}: expected a JSON object")
        yield number, obj
