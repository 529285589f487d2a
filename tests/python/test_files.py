"""`batchcast._files.write_whole`, the one writer of files that others read
while they are written: the file is replaced whole, private (0600) unless
the caller names a mode, and nothing is left beside it; the collocated
benchmark's `--json` goes through it with the mode of any file it writes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from batchcast._files import write_whole

ROOT = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_a_file_is_replaced_whole_and_private_by_default(tmp_path):
    path = tmp_path / "count"
    path.write_text("old")
    path.chmod(0o644)
    write_whole(str(path), "new")
    assert path.read_text() == "new"
    assert _mode(path) == 0o600
    assert os.listdir(tmp_path) == ["count"]


def test_a_given_mode_is_kept_less_the_umask(tmp_path):
    path = tmp_path / "results.json"
    write_whole(str(path), "{}", mode=0o666)
    assert _mode(path) == 0o666 & ~_umask()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "count"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_whole(str(path), "\udc80")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["count"]


def test_the_benchmark_json_is_written_whole_with_a_shareable_mode(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from collocated_bench.options import parse_args
    from collocated_bench.report import write_json

    args = parse_args(["--modes", "independent", "--trainers", "1"])
    path = tmp_path / "results.json"
    dataset = {"files": 0, "mean_file_kib": 0}
    write_json(str(path), args, dataset, {}, [], [], 0.0)
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["results"] == [] and doc["config"]["modes"] == ["independent"]
    assert _mode(path) == 0o666 & ~_umask()
    assert os.listdir(tmp_path) == ["results.json"]
