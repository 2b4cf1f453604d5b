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
