"""How the job ended (crashed, hung, diverged, slow, unknown), from the evidence rather than the category.

Enters: the leading category, the ranks table, all findings, the culprits and the catalog ids whose
lines say the processes wait; leaves one state word. Used by verdict.decide.
"""

from __future__ import annotations

import polars as pl

from forensics.passes.slowdown import SLOWDOWN_PATTERNS
from forensics.passes.traceback_context import UNCAUGHT
from forensics.schema import Category

EXCEPTION_TEXT = (
    r"\b(?:[A-Z]\w*)?(?:Error|Exception)\b:|\b(?:CUDA|NCCL|cuDNN) error\b|exception: |terminate called"
    r"|\bexitcode: -?[1-9]|exit(?:s|ed)? with (?:return )?code|\bexit code:? -?[1-9]|return code = -?[1-9]|exit status -?[1-9]"
    r"|exited on signal|interrupted by signal"
    r"|\b(?:Segmentation fault|Aborted|core dumped|Killed|CANCELLED|Out Of Memory|oom-kill)\b|Received (?:Signals\.)?SIG[A-Z]+|Received \d+ death signal"
    r"|\bNCCL failure\b|\bncclSystemError\b|unhandled system error|Fatal Python error|\bFATAL\b"
    r"|sigkill_handler\] Killing subprocess"  # the DeepSpeed launcher ends its workers
    r"|terminated normally, but \d+ process(?:es)? returned"  # mpirun: a rank exited non-zero
    r"|Check failed: |: Assertion [`'].*' failed\."  # native checks abort the process
    r"|^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\s*$"  # a traceback's last line with no message: `AssertionError`
)


# A sticky CUDA error, an OOM or a dead GPU ends the process even when no exception line survived.
FATAL_BY_NATURE = [Category.CUDA_ERROR, Category.CUDA_OOM, Category.HARDWARE, Category.HOST_OOM]
# An error with a cause (a network, setup, kill, storage or data error, and a CUDA error or an OOM
# logged at error level: NCCL's `Cuda failure`) ends the job too, unless the ranks then hung until a
# timeout (an IB error that leaves the collective waiting for the watchdog). Hardware at error level
# (a throttled GPU, corrected ECC errors) may leave the job running slower: only critical is fatal.
FATAL_UNLESS_HUNG = [
    Category.CUDA_ERROR,
    Category.CUDA_OOM,
    Category.HOST_OOM,
    Category.NETWORK,
    Category.ENVIRONMENT,
    Category.PROCESS_KILLED,
    Category.CHECKPOINT_IO,
    Category.DATA_PIPELINE,
]


def run_state(category: str, ranks: pl.DataFrame, findings: pl.DataFrame, culprits: list[int], waits: frozenset[str] = frozenset()) -> str:
    """How the job ended, from the evidence rather than the category.

    crashed: the culprit (or, with none named, any rank) ended on an exception, an exit
    code, a kill or an abort of its own, or an error with a cause (network, setup, kill, storage,
    data, or a CUDA or memory one logged at error level; the failure itself or its symptom, such as
    NCCL's `-> 2` chain) stands with no hang after it, or an uncaught traceback (cut off before its
    exception line or not) ends a process while nothing shows a hang; hung: collectives timed out or a hang was
    localized while the culprit went quiet, even if the watchdog then aborted everyone, or
    a stack dump, an NCCL RAS report of missing or lagging ranks, or a pattern of `waits` (the catalog's
    flag: resources left pending) shows processes waiting;
    diverged: numerics went bad while the processes kept running; slow: nothing died
    and something was slower than it should be; unknown: none of that is evident.
    """
    if category == Category.NO_FAILURE:
        return "healthy"
    failures = findings.filter(pl.col("role") != "event", pl.col("severity") != "info")
    if failures.is_empty():
        return "unknown"
    dying = pl.col("text").str.contains(EXCEPTION_TEXT)
    own_errors = failures.filter(
        pl.col("role").is_in(["initiating", "symptom"]) & (pl.col("category") != Category.COLLECTIVE_TIMEOUT) & dying
    )
    if culprits:
        own_errors = own_errors.filter(pl.col("rank").is_in(culprits))
    timed_out = (pl.col("category") == Category.COLLECTIVE_TIMEOUT) & pl.col("text").str.contains(r"(?i)timed? ?out")
    # A rank whose own collective timed out dies by its watchdog (SIGABRT, a fatal Python error, the
    # exception the stuck call raises): the hang ending, not a crash of its own.
    timed_out_ranks = failures.filter(timed_out)["rank"].drop_nulls().unique().implode()
    own_errors = own_errors.filter(~pl.col("rank").is_in(timed_out_ranks).fill_null(False))
    fatal = failures.filter(pl.col("role") == "initiating", pl.col("severity") == "critical", pl.col("category").is_in(FATAL_BY_NATURE))
    culprit_died = not own_errors.is_empty() or not fatal.is_empty() or (not ranks.is_empty() and ranks["status"].is_in(["killed"]).any())
    anyone_died = culprit_died or not failures.filter(dying).is_empty()
    # A traceback the log cuts off before its exception line was still uncaught: its process died.
    traceback_ended = not failures.filter(pl.col("pattern").is_in(list(UNCAUGHT))).is_empty()
    # localized, dumped while waiting, seen waiting by NCCL RAS, or a line that says the processes wait
    waiting = pl.col("pattern").str.contains("^(?:HANG|STACK|RAS)") | pl.col("pattern").is_in(list(waits))
    hang_evidence = not failures.filter(timed_out | waiting).is_empty()
    if category == Category.NUMERICAL:
        return "crashed" if anyone_died else "diverged"
    if culprit_died:
        return "crashed"
    if hang_evidence:
        return "hung"
    ended = failures.filter(
        pl.col("role").is_in(["initiating", "symptom"]),
        pl.col("severity").is_in(["critical", "error"]),
        pl.col("category").is_in(FATAL_UNLESS_HUNG),
    )
    if anyone_died or traceback_ended or not ended.is_empty():
        return "crashed"
    slowing = (pl.col("category") == Category.STRAGGLER) | pl.col("pattern").is_in(list(SLOWDOWN_PATTERNS))
    if category == Category.STRAGGLER or not failures.filter(slowing).is_empty():
        return "slow"
    return "unknown"
