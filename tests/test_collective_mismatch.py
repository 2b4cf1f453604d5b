"""The odd rank out of DETAIL fingerprint-mismatch errors is the one its peers name."""

from __future__ import annotations

import json

import polars as pl

from forensics.passes.collective_mismatch import odd_rank_out
from forensics.schema import FINDINGS, conform


def _mismatch(reporter: int, named: int, own_op: str, named_op: str, line: int) -> dict:
    captures = {"rank": str(reporter), "seq": "83", "op": own_op, "other_rank": str(named), "other_seq": "83", "other_op": named_op}
    return {
        "pattern": "DIST023",
        "category": "COLLECTIVE_TIMEOUT",
        "severity": "critical",
        "role": "symptom",
        "file": f"rank_{reporter}.log",
        "line": line,
        "rank": reporter,
        "text": "Detected mismatch ...",
        "captures": json.dumps(captures),
    }


def test_rank_named_by_the_others_is_the_culprit_not_the_one_it_names():
    rows = [
        _mismatch(0, 1, "ALLREDUCE", "ALLGATHER", 10),
        _mismatch(1, 0, "ALLGATHER", "ALLREDUCE", 11),
        _mismatch(2, 1, "ALLREDUCE", "ALLGATHER", 12),
        _mismatch(3, 1, "ALLREDUCE", "ALLGATHER", 13),
    ]
    found = odd_rank_out(conform(pl.DataFrame(rows), FINDINGS))
    assert found.select("rank", "role", "category", "file").row(0) == (1, "initiating", "COLLECTIVE_TIMEOUT", "rank_1.log")
    assert "ALLGATHER" in found["text"][0]


def test_two_ranks_naming_each_other_is_a_tie_and_names_no_one():
    rows = [_mismatch(0, 1, "ALLREDUCE", "ALLGATHER", 10), _mismatch(1, 0, "ALLGATHER", "ALLREDUCE", 11)]
    assert odd_rank_out(conform(pl.DataFrame(rows), FINDINGS)).is_empty()


def test_a_single_accusation_names_no_one():
    # deepspeed#7568: only rank 2's error survives; it says rank 3 differs, which is as true of rank 2.
    assert odd_rank_out(conform(pl.DataFrame([_mismatch(2, 3, "ALLREDUCE", "GATHER", 1)]), FINDINGS)).is_empty()


# speechbrain/speechbrain#1166 (real line, cut by the paste before `but Rank N is running`).
CUT_MISMATCH = (
    "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running inconsistent collective: "
    "CollectiveFingerPrint(OpType=BROADCAST, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes=TensorOptions("
    "dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (default), pinned_memory=false "
    "(default), memory_format=(nullopt))"
)


def test_a_mismatch_line_cut_short_is_read_and_its_reporting_rank_is_no_culprit(tmp_path):
    from forensics.flow import analyze

    (tmp_path / "error.log").write_text(f"[rank0]: {CUT_MISMATCH}\n")
    verdict = analyze(tmp_path).verdict
    assert verdict.category == "COLLECTIVE_TIMEOUT"
    assert "DIST023" in [e["pattern"] for e in verdict.hypotheses[0].evidence]
    assert verdict.culprit_ranks == []  # rank 0 printed it; the rank at fault is the one its peers name


# hiyouga/LlamaFactory#9258 (real line, cut by the paste after `memory used`).
RAY_MEMORY_MONITOR_CUT = (
    "Memory on the node (IP: 10.1.180.84, ID: ba65c80c8aec6b1c406693f640c53f85422d4d73b069747d69875d42) where the task "
    "(task ID: d221d26232c9bae05def6a6d00dbd292d4fc77cc01000000, name=head, rank=0,, pid=4503, memory used"
)


def test_ray_s_memory_monitor_line_cut_short_is_a_host_oom_of_the_rank_it_names(tmp_path):
    from forensics.flow import analyze

    (tmp_path / "console.log").write_text(f"{RAY_MEMORY_MONITOR_CUT}\n")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("HOST_OOM", [0])
