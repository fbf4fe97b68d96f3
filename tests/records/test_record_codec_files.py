"""Trial records below the database: the JSON codec round-trips what it exports, and
record files read gzip by content and name the line they cannot read."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import autotune
from autotune.records import TrialRecord, record_from_json, record_to_json
from autotune.records.files import parse_lines, read_lines, write_text

RECORD = TrialRecord(workload_key=autotune.workload("matmul", M=8, N=8, K=8).key,
                     target_key="llvm -mcpu=haswell -cores=2", config={"index": 3, "x": 1},
                     config_index=3, costs=(1e-3, 2e-3), cost=1.5e-3, gflops=0.7,
                     error="none", extra={"retime": {"status": "ok"}}, worker="w1")


def test_an_exported_record_reads_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl.gz"
    with write_text(path) as out:
        out.write(json.dumps(record_to_json(RECORD)) + "\n\n")
    plain = tmp_path / "records.jsonl"  # gzip by content, whatever the name
    plain.write_bytes(path.read_bytes())
    with read_lines(plain) as lines:
        (number, obj), = list(parse_lines(lines))
    assert number == 1 and record_from_json(obj) == RECORD


@pytest.mark.parametrize("damage, message", [
    (lambda data: data[:-12], "line 3: the compressed file ends early"),
    (lambda data: gzip.compress(gzip.decompress(data).replace(b"}\n{", b"}\n\xff{")),
     r"line 2: not UTF-8 text \(byte 0xff at column 1\)"),
])
def test_a_damaged_file_names_its_line(tmp_path: Path, damage, message: str) -> None:
    line = json.dumps(record_to_json(RECORD)) + "\n"
    path = tmp_path / "records.jsonl.gz"
    path.write_bytes(damage(gzip.compress((line * 3).encode())))
    with read_lines(path) as lines, pytest.raises(ValueError, match=message):
        list(parse_lines(lines))
