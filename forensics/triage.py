"""The investigation protocol's first two questions for a verdict: when in the run did it fail, and
how many ranks. Enters: the verdict's category and first failure, the lines and ranks tables, the
world size; leaves short notes for the postmortem. Used by verdict.decide.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import polars as pl

from forensics.passes.rank_ranges import rank_ranges
from forensics.schema import Category

# A failure this close to the first timestamp of all the logs says where the excerpt starts, not when the run failed.
LOGS_START_AT_FAILURE_S = 5.0

# The investigation protocol's priors: what usually fails in each time window of a run.
EARLY = {Category.ENVIRONMENT, Category.DEVICE_MISMATCH, Category.CHECKPOINT_IO, Category.CUDA_OOM, Category.DATA_PIPELINE}
AFTER_WARMUP = {
    Category.NUMERICAL,
    Category.CUDA_OOM,
    Category.HOST_OOM,
    Category.DATA_PIPELINE,
    Category.CHECKPOINT_IO,
    Category.STRAGGLER,
}
LATE = {Category.HARDWARE, Category.COLLECTIVE_TIMEOUT, Category.NETWORK, Category.PROCESS_KILLED, Category.CUDA_ERROR}


def triage(
    verdict_category: str,
    first: dict[str, Any] | None,
    lines: pl.DataFrame,
    ranks: pl.DataFrame,
    world: int | None,
    state: str = "crashed",
    culprits: list[int] | None = None,
) -> list[str]:
    """The investigation protocol's first two questions: when did it fail, and how many ranks.

    A slow run did not fail: its first slow line is placed in time, and its slow ranks counted."""
    notes = []
    start = lines["time"].min() if not lines.is_empty() else None
    first_time = (first.get("time") or first.get("time_after")) if first else None
    if start is not None and first_time:
        elapsed = (datetime.fromisoformat(first_time.replace("Z", "+00:00")) - start).total_seconds()
        if not first.get("time"):
            notes.append("The failing line has no timestamp; timing uses the last timestamp before it in the same log.")
        if elapsed < LOGS_START_AT_FAILURE_S:
            notes.append("Time into the run: UNKNOWN; the logs start at the failure (their first timestamp is within seconds of it).")
            window = None
        elif elapsed < 300:
            window, prior = f"{elapsed:.0f} s after the first log line", EARLY
            note = "early failures point to configuration or environment"
        elif elapsed < 3 * 3600:
            window, prior = f"{elapsed / 60:.0f} min into the run", AFTER_WARMUP
            note = "after warm-up, look at numerics and resources (memory, data)"
        else:
            window, prior = f"{elapsed / 3600:.1f} h into the run", LATE
            note = "late failures point to hardware or rare races"
        if window is not None:
            known = verdict_category not in (Category.UNKNOWN, Category.NO_FAILURE)
            if known and verdict_category not in prior:
                note += f"; here the evidence points to {verdict_category} instead"
            notes.append(f"{'First seen slow' if state == 'slow' else 'Failed'} {window}: {note}.")
    elif first is None:
        notes.append("Time into the run: no failing line to place in time.")
    else:
        notes.append("Time into the run: UNKNOWN (the failing lines carry no timestamps).")
    if not ranks.is_empty():
        failed = ranks.filter(pl.col("status").is_in(["crashed", "killed"]))["rank"].to_list()
        total = world or ranks.height
        if verdict_category == Category.NO_FAILURE:
            notes.append(
                "The one rank seen ended without a failure signature."
                if total == 1
                else f"All {total} ranks seen ended without a failure signature."
            )
        elif state == "slow":
            slow = sorted(culprits or [])
            if slow:
                notes.append(
                    f"No rank failed; {len(slow)} of {total} {'was' if len(slow) == 1 else 'were'} slow"
                    f" ({'rank' if len(slow) == 1 else 'ranks'} {rank_ranges(slow)}) and held the others back."
                )
            else:
                notes.append(f"No rank failed; the whole job ({total} {'rank' if total == 1 else 'ranks'}) ran slow.")
        elif len(failed) == 1 and total == 1:
            notes.append(f"The one rank seen failed first-hand (rank {failed[0]}).")
        elif len(failed) == 1:
            notes.append(f"One rank of {total} failed first-hand (rank {failed[0]}); the others' errors are consequences.")
        elif failed:
            notes.append(f"{len(failed)} of {total} ranks failed first-hand: a shared cause (data, config, network, code) is likely.")
        elif timed_out := ranks.filter(pl.col("status") == "timed_out")["rank"].to_list():
            stalled = ranks.filter(pl.col("status") == "stalled")["rank"].to_list()
            also = f" and {len(stalled)} stalled ({'rank' if len(stalled) == 1 else 'ranks'} {rank_ranges(stalled)})" if stalled else ""
            notes.append(
                f"No rank crashed; {len(timed_out)} of {total} timed out waiting{also}: a hang, caused by what the ranks"
                " waited for, not by the ones that timed out."
            )
        missing = ranks.filter((pl.col("status") == "silent") & pl.col("lines").is_null())["rank"].to_list()
        if missing:
            notes.append(
                f"{len(missing)} {'rank' if len(missing) == 1 else 'ranks'} left no log at all: {', '.join(map(str, missing[:16]))}."
            )
    return notes
