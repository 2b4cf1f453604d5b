"""Keep what the analysis reads from a large text file, so a big incident fits in memory.

Enters: one file's physical lines (`line`, `raw`) and how many training-metric lines the
file may keep. Leaves: the subset the passes read, line numbers unchanged.

Assumes the passes read only (a) lines that hold a catalog literal or a failure word, with
the traceback, stack or table around them, and notes (warnings, NCCL, exits, completion,
checkpoints) on their own, (b) training-metric lines, and (c) the first
and last lines of the file (how a rank started, where it stopped). A file of at most
FULL_FILE_LINES lines is kept whole. In a larger one the metric lines are sampled at a
fixed stride, keeping every metric line near the end and every line with a nan/inf value:
a loss spike or a slow step that falls between two samples is not seen, and the report
says how many lines each file kept.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import polars as pl

from forensics.ingest.metrics import CANDIDATE as METRIC_CANDIDATE

FULL_FILE_LINES = 20_000
HEAD_LINES = 100
TAIL_LINES = 200
BEFORE_HIT = 30  # the lines leading up to a failure line (a log record's own header)
AFTER_HIT = 200  # a traceback, a stack dump or a torchrun failure table after its first line
TAIL_METRIC_LINES = 100
# Words of failure lines, kept with the lines around them: errors and exceptions, tracebacks
# and thread dumps, signals, kills, asserts, timeouts.
FAILURE_WORDS = (
    r"(?i)error|exception|traceback|most recent call|fatal|critical|abort|fail|kill|signal|segmentation|core dump"
    r"|assert|timeout|timed out|watchdog|terminat|out of memory|thread 0x|^\s*thread \d"
)
# Words of lines kept on their own: warnings, communicator and launcher notes, exits,
# preemptions, completion and checkpoint notes.
NOTE_WORDS = r"(?i)warn|nccl|gloo|rendezvous|barrier|exit|preempt|cancel|complete|finish|success|saving|saved|checkpoint"
# A metric that turned nan/inf: `loss: nan`, `'loss': nan`, `loss=nan`, `loss nan`, `grad norm inf`
# (never Megatron's `number of nan iterations: 0`).
NONFINITE_VALUE = r"(?i)(?:[:=]\s*'?|loss\]?\s+|\bnorm\s+)[-+]?(?:nan|inf)\b"


def metric_lines_per_file(files: int, budget: int) -> int:
    """The metric lines one file may keep when `files` files share `budget` of them."""
    return max(TAIL_METRIC_LINES, budget // max(files, 1))


@dataclass(frozen=True)
class Keep:
    """Catalog literals a large file keeps: failure literals with their context, notes alone."""

    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # the literals of event patterns (a checkpoint saved, a run finished)


WORDS_ONLY = Keep()  # no catalog: the failure and note words alone


@cache
def _kept_words(keep: Keep) -> tuple[str, str]:
    """(any line worth keeping, a failure line kept with its context) as two regexes.

    A literal that holds one of the words adds nothing to the first scan (it runs over
    every line), so only the others join the words there.
    """
    words = "|".join(w.removeprefix("(?i)") for w in (FAILURE_WORDS, NOTE_WORDS, NONFINITE_VALUE))
    others = [literal for literal in keep.failures + keep.notes if not re.search(words, literal, re.IGNORECASE)]
    worth = (f"(?:{_alternation(others)})|" if others else "") + f"(?i:{words})"
    failure = FAILURE_WORDS + (f"|(?-i:{_alternation(keep.failures)})" if keep.failures else "")
    return worth, failure


def _alternation(literals: Iterable[str]) -> str:
    return "|".join(re.escape(literal) for literal in literals)


def condense(lines: pl.DataFrame, keep: Keep, metric_lines: int, head: bool = True, tail: bool = True) -> pl.DataFrame:
    """The rows of `lines` the analysis reads (all of them when the file is small).

    One scan of every line finds what is worth keeping (a literal or a word, rare by
    design), another finds metric lines; failure lines are told apart on the few kept.
    `head`/`tail`: whether `lines` begin/end the file (a piece of a huge file may do neither).
    """
    total = lines.height
    if total <= FULL_FILE_LINES and head and tail:
        return lines
    worth, failure = _kept_words(keep)
    raw, line = pl.col("raw"), pl.col("line")
    marked = lines.with_columns(_worth=raw.str.contains(worth), _metric=raw.str.contains(METRIC_CANDIDATE))
    failures = marked.filter("_worth").filter(raw.str.contains(failure))["line"]
    hit_line = pl.when(line.is_in(failures.implode())).then(line)
    near_failure = ((line - hit_line.forward_fill()) <= AFTER_HIT) | ((hit_line.backward_fill() - line) <= BEFORE_HIT)
    metric_total = int(marked["_metric"].sum())
    stride = max(1, math.ceil((metric_total - TAIL_METRIC_LINES) / max(metric_lines - TAIL_METRIC_LINES, 1)))
    metric_index = pl.col("_metric").cast(pl.Int64).cum_sum()
    near_end = (metric_index > metric_total - TAIL_METRIC_LINES) & tail
    sampled = pl.col("_metric") & ((metric_index % stride == 0) | near_end)
    row = pl.int_range(pl.len())
    edges = ((row < HEAD_LINES) & head) | ((row >= total - TAIL_LINES) & tail)
    kept = marked.filter(edges | pl.col("_worth") | near_failure.fill_null(False) | sampled)
    # A filtered string column still points into the whole file's buffer: copy the kept text out.
    return kept.select("line", raw=pl.concat_str(raw, pl.lit("")))
