"""Attacks from issue 14, each reproduced at test time: no crash, no escape, nothing lost or overwritten."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib

import polars as pl
import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.flow import analyze
from forensics.ingest.timestamps import times_of

runner = CliRunner()
OOM = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.10 GiB of which 1.06 GiB is free.\n"


@pytest.mark.parametrize(
    "text",
    [
        "0000-01-01T00:00:00Z RuntimeError: x",
        "9999-12-31T23:59:59+14:00 boom",
        "0000/01/01 00:00:00.000, 0, NVIDIA H100",
        "Mon Jan  1 00:00:00 0000 x",
    ],
)
def test_timestamps_out_of_any_job_s_range_are_no_time(text):
    assert times_of(pl.Series("text", [text]), 2026).to_list() == [None]


def test_out_of_range_times_and_huge_numbers_do_not_crash_the_analysis(incident):
    root = incident(
        {
            "rank_0.log": "0000-01-01T00:00:00Z [rank0]: started\n9999-12-31T23:59:59+14:00 [rank0]: x\n" + OOM,
            "rank_2147483648.log": "RuntimeError: CUDA error: an illegal memory access was encountered\n",
            "worker-3000000000.log": "hello\n",
            "dmesg.log": "[99999999999999999999.123] NVRM: Xid (PCI:0000:3b:00): 79, pid=123, GPU has fallen off the bus.\nbtime 99999999999999999999\n",
            "console.log": "[rank0]: world_size=3000000000 nranks 2000000000\n",
        }
    )
    analysis = analyze(root)
    assert analysis.world_size <= 1 << 17
    inputs = analysis.incident.inputs
    assert inputs.filter(pl.col("path") == "rank_2147483648.log")["rank"].to_list() == [None]  # not a rank


def test_a_huge_world_size_costs_a_few_range_pairs_not_a_row_per_rank(incident, tmp_path):
    """One line promising 131,071 ranks once wrote a 33 MB verdict.json, one row per silent rank."""
    root = incident({"train.log": "[rank0]: initialized process group: backend=nccl rank=0 world_size=131071\n"})
    assert runner.invoke(app, ["analyze", str(root), "--out", str(tmp_path / "out")]).exit_code == 0
    verdict = (tmp_path / "out" / "verdict.json").read_text()
    document = json.loads(verdict)
    assert len(verdict) < 1 << 20
    assert document["silent_ranks"] == [[1, 131070]]
    assert document["ranks"][0]["rank"] == 0 and len(document["ranks"]) == 1 + 1024


def test_a_file_name_that_is_not_utf8_is_listed_escaped_and_not_read(tmp_path):
    (tmp_path / "rank_0.log").write_text(OOM)
    with open(bytes(tmp_path) + b"/rank_\xff\xfe.log", "wb") as odd_name:
        odd_name.write(b"RuntimeError: boom\n")
    inputs = analyze(tmp_path).incident.inputs
    odd = inputs.filter(pl.col("path").str.starts_with("rank_\\x"))
    assert odd.select("path", "problem").rows() == [("rank_\\xff\\xfe.log", "name is not valid UTF-8: not read")]


def test_control_and_bidi_characters_reach_neither_the_report_nor_the_terminal(incident, tmp_path):
    root = incident({"rank_0.log": "[rank0]: RuntimeError: CUDA error: \u202eevil\u2066 \x07bell \x08back \x9b31m\n"})
    out = tmp_path / "out"
    result = runner.invoke(app, ["analyze", str(root), "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = (out / "postmortem.md").read_text()
    for text in (report, result.output):
        assert not any(ch in text for ch in "\u202e\u2066\x07\x08\x9b")
    assert "\\u202eevil" in report  # shown, not dropped


@pytest.mark.parametrize("where", ["same", "inside", "contains"])
def test_an_out_that_overlaps_the_input_is_refused_and_the_input_untouched(incident, where):
    root = incident({"rank_0.log": OOM, "verdict.json": '{"mine": true}\n', "figures/plot.png": b"\x89PNG user"})
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    out = {"same": root, "inside": root / "report", "contains": root.parent}[where]
    result = runner.invoke(app, ["analyze", str(root), "--out", str(out)])
    assert result.exit_code == 2 and "--out" in result.output
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_rerun_removes_what_the_last_run_wrote_and_nothing_else(incident, tmp_path):
    first = incident({"rank_0.log": OOM})
    out = tmp_path / "out"
    assert runner.invoke(app, ["analyze", str(first), "--out", str(out), "--frames"]).exit_code == 0
    assert (out / "frames" / "lines.parquet").is_file()
    (out / "figures").mkdir(exist_ok=True)
    (out / "figures" / "mine.png").write_bytes(b"user's own figure")
    assert runner.invoke(app, ["analyze", str(first), "--out", str(out)]).exit_code == 0
    assert not (out / "frames" / "lines.parquet").exists()  # the earlier run's frames do not linger
    assert (out / "figures" / "mine.png").read_bytes() == b"user's own figure"  # never ours to delete
    assert json.loads((out / ".forensics-written").read_text()) == ["postmortem.md", "verdict.json"]
    assert not list(out.glob(".*.tmp"))


def test_a_failing_figure_or_section_is_named_not_fatal(incident, tmp_path, monkeypatch):
    from forensics import sources

    def broken(*args):
        raise ValueError("cannot draw this")

    monkeypatch.setattr(sources, "FIGURES", [broken, *sources.FIGURES])
    monkeypatch.setattr(sources, "SECTIONS", [broken, *sources.SECTIONS])
    out = tmp_path / "out"
    result = runner.invoke(app, ["analyze", str(incident({"rank_0.log": OOM})), "--out", str(out)])
    assert result.exit_code == 0, result.output
    errors = json.loads((out / "verdict.json").read_text())["analysis_errors"]
    assert errors == ["broken failed: ValueError: cannot draw this"] * 2
    assert "broken failed" in (out / "postmortem.md").read_text()


def _trace(events: list[dict], rank: int) -> str:
    return json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank}})


def test_impossible_trace_times_and_deep_nesting_cost_one_file_at_most(tmp_path):
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7}
    (tmp_path / "rank0_trace.json").write_text(
        _trace([kernel | {"ts": 1e30, "dur": 1e23}, kernel | {"ts": 1.5e19, "dur": 1.5}, kernel | {"ts": 100, "dur": 10}], 0)
    )
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    (tmp_path / "rank1_trace.json").write_text(
        '{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"pid":0,"tid":7,"args":' + deep + "}]}"
    )
    inputs = analyze(tmp_path).incident.inputs.sort("path")
    assert inputs.select("path", "status", "problem").rows() == [
        ("rank0_trace.json", "partial", "2 events with impossible times dropped"),
        ("rank1_trace.json", "skipped", "unreadable trace: JSON nested too deeply"),
    ]
    result = runner.invoke(app, ["traces", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].split() == ["0", "0.0", "—", "—", "—", "—"]


DUMP_HEAD = b"\x80\x02}(X\x07\x00\x00\x00entries"  # a dict whose first key is `entries`, as a real dump's


def _status(analysis, name: str) -> dict:
    return analysis.incident.inputs.filter(pl.col("path") == name).row(0, named=True)


def test_pickle_bombs_are_bounded_before_they_are_built(tmp_path):
    # 16 M empty dicts in 16 MB would take 1.2 GB: refused from the byte count alone.
    (tmp_path / "nccl_trace_rank_0").write_bytes(DUMP_HEAD + b"](" + b"}" * 16_000_000 + b"eu.")
    # One dict referenced 200,000 times (memo): cheap to load, so read, but only a ring's worth of it.
    (tmp_path / "nccl_trace_rank_1").write_bytes(DUMP_HEAD + b"](}q\x00" + b"h\x00" * 200_000 + b"eu.")
    # A list nested a million deep: loads without recursion and is no dump entry.
    (tmp_path / "nccl_trace_rank_2").write_bytes(DUMP_HEAD + b"]" * 1_000_000 + b"a" * 999_999 + b"u.")
    (tmp_path / "rank_3.log").write_text(OOM)
    analysis = analyze(tmp_path)
    assert analysis.verdict.category == "CUDA_OOM"
    bomb = _status(analysis, "nccl_trace_rank_0")
    assert bomb["status"] == "skipped" and "containers" in bomb["problem"]
    memo = _status(analysis, "nccl_trace_rank_1")
    assert memo["status"] == "partial" and "the newest 100,000 read" in memo["problem"]
    assert analysis.incident.tables["fr_entries"].filter(pl.col("rank") == 1).height == 100_000
    assert _status(analysis, "nccl_trace_rank_2")["status"] in {"parsed", "skipped"}


def test_a_small_archive_that_inflates_to_134_million_lines_is_read_in_bounded_memory(tmp_path):
    """260 KB of gzip, 256 MB of one-character lines: streamed piece by piece (once 5.5 GB read whole)."""
    incident = tmp_path / "incident"
    incident.mkdir()
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    block = b"a\n" * (1 << 20)
    data = b"".join(compressor.compress(block) for _ in range(128)) + compressor.flush()
    (incident / "rank_0.log.gz").write_bytes(data)
    # The peak is the child's own (VmHWM, reset by exec): ru_maxrss survives fork and exec, so a
    # child of a test runner grown past 2 GiB would report the runner's size instead.
    script = (
        "import sys\n"
        "from forensics.flow import analyze\n"
        "status = analyze(sys.argv[1]).incident.inputs.row(0, named=True)\n"
        "peak = next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
        "print(status['lines'], peak)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(incident)], capture_output=True, text=True, check=True)
    lines, peak_kib = map(int, done.stdout.split())
    assert lines == 128 << 20
    assert peak_kib < 2 << 20  # under 2 GiB
