"""JSON-lines files of any kind: opened as text (gzip by name or by content), parsed by line.

A file is read a line at a time and each line decoded alone, so that what cannot be read
(a byte that is not UTF-8, a gzip stream cut short, a line that is not a JSON object) is a
ValueError naming its line, whatever the buffering.
"""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import IO, Any, BinaryIO, Iterable, Iterator, Union

PathLike = Union[str, Path]
_GZIP_MAGIC = b"\x1f\x8b"


class TextLines:
    """The lines of a file read as UTF-8, each decoded alone (see the module); a context
    manager that closes the file."""

    def __init__(self, binary: BinaryIO) -> None:
        self._binary = binary

    def __iter__(self) -> Iterator[str]:
        number = 0
        while True:
            number += 1
            try:
                raw = self._binary.readline()
            except EOFError:
                raise ValueError(f"line {number}: the compressed file ends early "
                                 "(truncated)") from None
            except (gzip.BadGzipFile, zlib.error) as err:
                raise ValueError(f"line {number}: not a readable gzip stream ({err})") from None
            if not raw:
                return
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"line {number}: not UTF-8 text (byte 0x{raw[err.start]:02x} "
                                 f"at column {err.start + 1})") from None

    def close(self) -> None:
        self._binary.close()

    def __enter__(self) -> "TextLines":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_text(path: PathLike) -> IO[str]:
    """``path`` opened to write UTF-8 text, gzip-compressed for a ``.gz`` name."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="utf-8")
    return open(path, "w", encoding="utf-8")


def read_lines(path: PathLike) -> TextLines:
    """The lines of ``path`` (`TextLines`), decompressed when its bytes are gzip's."""
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == _GZIP_MAGIC
    binary: BinaryIO = gzip.open(path, "rb") if gzipped else open(path, "rb")  # type: ignore[assignment]
    return TextLines(binary)


def parse_lines(fp: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line; ValueError names a bad line."""
    for number, line in enumerate(fp, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: not JSON ({exc.msg})") from None
        except RecursionError:
            raise ValueError(f"line {number}: JSON nested too deep") from None
        if not isinstance(obj, dict):
            raise ValueError(f"line {number}: expected a JSON object")
        yield number, obj
