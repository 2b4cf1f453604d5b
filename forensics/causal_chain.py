"""The Five Whys of an incident, built from the lines that were found, not from a template.

Enters: the first failure of the leading hypothesis (a dict with rank, file, line, title,
pattern), its culprit ranks, every finding, the catalog entries and the category's playbook.
Leaves: whys from how the job ended back to that first failure, each naming the line it rests
on (`file:line`); then what the GPU driver logged for a culprit's process (an Xid in the kernel
log) when the first failure is not that Xid itself; then the usual causes of that failure as its
catalog entry states them, said to be shown by no line; then the evidence that would carry the
chain further.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics.catalog.load import Derived, Pattern

MAX_CAUSES = 2


WAITING = ("COLLECTIVE_TIMEOUT", "STRAGGLER")  # categories where the culprit is waited for, not dead


def causal_chain(
    category: str,
    first: dict[str, Any] | None,
    culprits: list[int],
    findings: pl.DataFrame,
    patterns: dict[str, Pattern | Derived],
    playbook: dict[str, Any],
    state: str = "crashed",
) -> list[str]:
    """The whys, effect first; empty when there is no first failure to explain. A slow or
    diverged run did not fail: its first question asks why it was slow or diverged."""
    if first is None:
        return []
    whys = []
    teardown = _earliest(findings.filter(pl.col("role") == "teardown"))
    if teardown is not None:
        whys.append(f"Why did the job end? Its processes were torn down: {_said(teardown)}.")
    crowd = findings.filter((pl.col("role") == "cascade") & ~pl.col("rank").is_in(culprits).fill_null(False))
    cascade = _earliest(crowd)
    if cascade is not None:
        others = crowd["rank"].drop_nulls().n_unique()
        who = f"{others} other ranks" if others > 1 else "another rank" if others == 1 else "the other processes"
        waited = f", waiting for {_who(culprits)}" if culprits else ""
        whys.append(f"Why did {who} fail? {_said(cascade)}{waited}.")
    subject = _who(culprits) if culprits else "the job"
    if state == "slow":
        question = f"Why was {subject} slow?"
    elif state == "diverged":
        question = f"Why did {subject}'s training diverge?"
    elif category in WAITING and culprits:
        question = f"Why did they wait for {subject}?"
    else:
        question = f"Why did {subject} fail?"
    whys.append(f"{question} {_said(first)}.")
    driver = findings.filter(pl.col("pattern").str.starts_with("GPU-XID") & pl.col("rank").is_in(culprits).fill_null(False))
    if not (first.get("pattern") or "").startswith("GPU-XID") and (xid := _earliest(driver)) is not None:
        whys.append(f"What did the GPU driver see? {_said(xid)}.")
    entry = patterns.get(first.get("pattern") or "")
    causes = list(entry.causes[:MAX_CAUSES]) if entry is not None and entry.causes else list(playbook.get("whys", [])[1 : 1 + MAX_CAUSES])
    if causes:
        whys.append("Why did that happen? No line shows it; the usual causes: " + "; ".join(c.rstrip(".") for c in causes) + ".")
    if playbook.get("next_evidence"):
        whys.append(f"What would take the chain further: {playbook['next_evidence']}")
    return whys


def _earliest(rows: pl.DataFrame) -> dict[str, Any] | None:
    if rows.is_empty():
        return None
    ordered = rows.sort([pl.col("time").is_null(), "time", "file", "line"])
    return ordered.row(0, named=True)


def _said(row: dict[str, Any]) -> str:
    """`<title> (rank N, `file:line`)`: what a finding says and the line it rests on."""
    where = f"`{row['file']}:{row['line']}`" if row.get("line") is not None else f"`{row['file']}`"
    rank = f"rank {row['rank']}, " if row.get("rank") is not None else ""
    return f"{row['title'].rstrip('.')} ({rank}{where})"


def _who(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(r) for r in ranks[:8])
    return f"ranks {shown}" + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
