"""Markdown building blocks: hostile log text cannot break tables, fences or inject HTML."""

from __future__ import annotations

import re

import pytest

from forensics.report.markup import cell, code, code_block, duration, ranges, table, where

# A pipe preceded by an even number of backslashes (zero included) splits a GFM table row.
LIVE_PIPE = r"(?<!\\)(?:\\\\)*\|"


def columns(row: str) -> int:
    """How many cells GFM sees in a `| a | b |` table row."""
    return len(re.findall(LIVE_PIPE, row)) - 1


def test_cell_escapes_what_breaks_a_table_or_renders():
    text = "a | b <script>alert(1)</script> & `x` *bold* _it_ [link](http://x) #h ~s\\"
    out = cell(text)
    assert "<" not in out and ">" not in out and "`" not in out
    assert re.search(LIVE_PIPE, out) is None  # every pipe escaped, by exactly one backslash
    assert "&lt;script&gt;" in out and "&amp;" in out
    for special in "*_[]#~":
        assert re.search(rf"(?<!\\){re.escape(special)}", out) is None, special


def test_cell_is_one_line_and_bounded():
    out = cell("line one\nline two\r\nthree", limit=1000)
    assert "\n" not in out and "\r" not in out
    long = cell("x" * 500, limit=160)
    assert len(long) == 160 and long.endswith("…")


def test_cell_of_none_is_a_dash():
    assert cell(None) == "—"


@pytest.mark.parametrize("text", ["plain", "has `one` tick", "has ``two`` ticks", "`starts", "ends`", "a\nb"])
def test_code_span_survives_backticks(text):
    out = code(text)
    fence = re.match(r"`+", out).group(0)
    assert out.endswith(fence)
    inner = out[len(fence) : -len(fence)]
    assert fence not in inner  # the body never closes the span early
    assert "\n" not in out
    assert inner.strip() == text.replace("\n", " ").strip()


def test_code_block_fence_is_longer_than_any_run_inside():
    body = ["```python", "print('x')", "````", "<script>alert(1)</script>"]
    out = code_block(body)
    first, *_, last = out.split("\n")
    fence = first.removesuffix("text")
    assert len(fence) >= 5 and last == fence
    assert out.count("\n" + fence + "\n") == 0  # no line inside equals the fence


def test_code_block_default_fence():
    assert code_block(["a", "b"]) == "```text\na\nb\n```"


def test_table_shape():
    out = table(["a", "b"], [(cell("x|y"), cell(None))])
    assert out.split("\n") == ["| a | b |", "|---|---|", "| x\\|y | — |"]


@pytest.mark.parametrize(
    "text",
    [
        " iteration      122/  250000 | consumed samples:       124928 | lm loss: 2.504220E+00 |",
        "| col | col2 |",
        "ends with a backslash \\",
        "a \\| b",
        "a \\\\| b",
    ],
)
def test_hostile_text_keeps_the_table_shape(text):
    out = table(["where", "rank", "line"], [(where("rank_3.log", 7), cell(text), code(text))])
    header, _, row = out.split("\n")
    assert columns(header) == columns(row) == 3


def test_where_cites_file_and_line():
    assert where("rank_3.log", 1042) == "`rank_3.log:1042`"
    assert where("rank_3.log", None) == "`rank_3.log`"
    assert where(None, 5) == "—"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0, 1, 2, 3, 7, 9, 10], "0-3, 7, 9-10"),
        ([5], "5"),
        ([], ""),
        ([3, 1, 2, 2, 1], "1-3"),
        (range(1024), "0-1023"),
        ([0, 2, 4], "0, 2, 4"),
    ],
)
def test_ranges(values, expected):
    assert ranges(values) == expected


def test_advice_keeps_commands_and_identifiers_pasteable():
    from forensics.report.markup import prose

    # Real fix texts of the catalog (OOM001, ENV019): settings and dotted names become code spans.
    assert prose("If reserved-but-unallocated memory is large, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") == (
        "If reserved-but-unallocated memory is large, set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`"
    )
    assert prose("Profile peak memory per step (torch.cuda.max_memory_allocated) before scaling up") == (
        "Profile peak memory per step (`torch.cuda.max_memory_allocated`) before scaling up"
    )
    assert prose("Check `ulimit -u`; lower OMP_NUM_THREADS | *not* more") == "Check `ulimit -u`; lower `OMP_NUM_THREADS` \\| \\*not\\* more"
    # A call with its argument and a keyword setting stay whole (NUM018, NUM001).
    assert prose("Re-run the failing step with torch.autograd.set_detect_anomaly(True) to locate the op") == (
        "Re-run the failing step with `torch.autograd.set_detect_anomaly(True)` to locate the op"
    )
    assert prose("Clip gradients (max_norm=1.0) and monitor grad norm") == "Clip gradients (`max_norm=1.0`) and monitor grad norm"


@pytest.mark.parametrize(("seconds", "expected"), [(0, "0 s"), (42.4, "42 s"), (750, "12 min"), (7199, "2 h 0 min"), (9000, "2 h 30 min")])
def test_duration(seconds, expected):
    assert duration(seconds) == expected


def test_advice_makes_the_cluster_tools_commands_code_with_their_flags():
    from forensics.report.markup import prose

    # Real advice of the catalog (XID048/ECC, XID079, KERN-HOST-OOM).
    assert prose("Read the ECC and remapping state: nvidia-smi -q -d ECC,ROW_REMAPPER on the host, and dmesg -T for Xid 48, 63") == (
        "Read the ECC and remapping state: `nvidia-smi -q -d ECC,ROW_REMAPPER` on the host, and `dmesg -T` for Xid 48, 63"
    )
    assert prose("Check dmesg for the OOM killer") == "Check `dmesg` for the OOM killer"
    # A path that merely starts like a command is not one.
    assert prose("See nvidia-smi/index") == "See nvidia-smi/index"
