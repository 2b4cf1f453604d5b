"""A folder of hostile files: analyze completes, accounts for every file, runs nothing, quotes safely."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from forensics.cli import app

INJECTION = "[rank5]: ValueError: bad sample <script>alert('x')</script> | col | ``` <img src=x onerror=alert(1)>"


class PlantedPickle:
    """Unpickling this runs os.system: it must never be unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def build(root: Path, marker: Path) -> dict[str, bytes]:
    """Write the hostile incident; return relative path -> bytes written."""
    lines = b"".join(b"[rank1]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 1] line %d\n" % i for i in range(20000))
    gz = gzip.compress(lines)
    files: dict[str, bytes] = {
        "random_0.bin": os.urandom(4096),
        "random_1.dat": os.urandom(70_000),
        "zero.log": b"",
        "one_line.log": b"[rank0]: " + b"A" * (5 << 20) + b"\n",
        "rank_2.log": b"[rank2]: before\n"
        + b"\x00" * 4096
        + b"\n[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered\n",
        "rank_1.log.gz": gz[: len(gz) // 2],
        "rank_3.log.zst": zstandard.ZstdCompressor().compress(lines)[:40] + os.urandom(300),
        "we ird \u00fc\u65e5 ..name...log": b"[rank4]: a file named with spaces, unicode and dots\n",
        "..dots": b"[rank6]: leading dots\n",
        "bad.pt.trace.json": b'{"schemaVersion": 1, "traceEvents": [ {"ph": "X", "name": ',
        "broken.json": b"this is { not json",
        "nccl_trace_rank_0": pickle.dumps(PlantedPickle(marker), protocol=2),
        "rank_5.log": (INJECTION + "\n```\n<script>alert(2)</script>\n").encode(),
    }
    deep = "/".join(["nest"] * 40)
    files[f"{deep}/rank_7.log"] = b"[rank7]: deep inside\n"
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return files


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    marker = base / "PWNED"
    root = base / "incident"
    files = build(root, marker)
    result = CliRunner().invoke(app, ["analyze", str(root), "--out", str(base / "out"), "--format", "json", "--frames"])
    return {"base": base, "root": root, "files": files, "marker": marker, "result": result}


def test_analyze_completes(hostile):
    result = hostile["result"]
    assert result.exit_code == 0, (result.output, result.exception)
    json.loads(result.stdout)


def test_the_planted_pickle_never_runs(hostile):
    assert not hostile["marker"].exists()


def test_every_file_is_listed_with_a_status(hostile):
    verdict = json.loads((hostile["base"] / "out" / "verdict.json").read_text())
    inputs = {i["path"]: i for i in verdict["inputs"]}
    assert set(inputs) == set(hostile["files"])
    for path, entry in inputs.items():
        assert entry["status"] in {"parsed", "partial", "skipped"}, path
        if entry["status"] != "parsed":
            assert entry["problem"], path


@pytest.mark.parametrize(
    ("path", "status", "problem"),
    [
        ("random_0.bin", "skipped", "binary"),
        ("zero.log", "skipped", "empty"),
        ("rank_1.log.gz", "partial", "truncated gzip"),
        ("rank_3.log.zst", "skipped", None),  # nothing recoverable from a corrupt frame
        ("rank_2.log", "parsed", None),
        ("one_line.log", "partial", "1 line(s) longer than 65,536 characters: only their start is read"),
    ],
)
def test_status_of_each_hostile_file(hostile, path, status, problem):
    verdict = json.loads((hostile["base"] / "out" / "verdict.json").read_text())
    entry = {i["path"]: i for i in verdict["inputs"]}[path]
    assert entry["status"] == status, entry
    if problem:
        assert problem in entry["problem"]


def test_evidence_is_still_found_among_the_junk(hostile):
    verdict = json.loads((hostile["base"] / "out" / "verdict.json").read_text())
    assert verdict["verdict"]["category"] == "CUDA_ERROR"
    assert verdict["verdict"]["culprit_ranks"] == [2]


def test_nothing_is_written_outside_out(hostile):
    written = {p.relative_to(hostile["base"]).parts[0] for p in hostile["base"].iterdir()}
    assert written == {"incident", "out"}
    on_disk = {p.relative_to(hostile["root"]).as_posix() for p in hostile["root"].rglob("*") if p.is_file()}
    assert on_disk == set(hostile["files"])  # the incident folder is untouched


def outside_code(markdown: str) -> str:
    """The markdown with fenced blocks and code spans removed: what renders as markup."""
    without_blocks = re.sub(r"^(`{3,})[^\n]*\n.*?^\1\s*$", "", markdown, flags=re.S | re.M)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", without_blocks)


def test_postmortem_quotes_the_injection_safely(hostile):
    markdown = (hostile["base"] / "out" / "postmortem.md").read_text()
    assert "rank_5.log" in markdown
    rendered = outside_code(markdown)
    assert "<script" not in rendered.lower()
    assert "<img" not in rendered.lower()


def test_outside_code_helper_really_strips_code():
    sample = "keep <b>\n```text\n<script>\n```\nand `<script>` and ```` `` <script> ```` end"
    assert outside_code(sample) == "keep <b>\n\nand  and  end"


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip bomb"])
def test_a_line_megabytes_long_is_read_only_to_its_start_and_said_so(tmp_path, compressed):
    """One 32 MB line (a redrawn progress bar, a blob, a 31 KB gzip bomb): every pattern would scan it whole."""
    from forensics.flow import load_incident
    from forensics.ingest.rank_logs import MAX_LINE_CHARS

    line = b"[rank0]: step 7 | loss 2.31 | " + b"}" * (32 << 20) + b"\n"
    data = gzip.compress(line, compresslevel=9) if compressed else line
    (tmp_path / "console.log").write_bytes(data)
    (tmp_path / "rank_1.log").write_bytes(b"[rank1]: step 7 | loss 2.30\n")
    incident = load_incident(tmp_path)
    row = incident.inputs.filter(incident.inputs["path"] == "console.log").row(0, named=True)
    assert row["status"] == "partial" and "1 line(s) longer than 65,536 characters" in row["problem"]
    texts = incident.lines.filter(incident.lines["file"] == "console.log")["text"]
    assert texts.str.len_chars().max() <= MAX_LINE_CHARS and texts[0].startswith("[rank0]: step 7 | loss 2.31")
