"""Two-stage matching of the catalog over all log lines.

Stage 1 looks for every pattern's rare literals at once over every line (one
Aho-Corasick pass, linear time): only lines containing some literal survive, and the
literals they hold say which patterns can match at all. Stage 2 runs the full regex of
those patterns only, on the survivors that hold one of their own literals. On real
incidents stage 1 keeps well under 1% of lines and names a handful of patterns, so
stage 2 costs almost nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from forensics.catalog.load import Pattern
from forensics.schema import FINDINGS, conform, empty

# A handler's report that it caught the error and went on: webdataset's warn_and_continue
# `Handling webdataset error (OSError('image file is truncated ...')). Ignoring.`
HANDLED = r"\)\)?\. (?:Ignoring|Skipping)(?: it)?\.\s*$"


def prefilter(lines: pl.DataFrame, patterns: Sequence[Pattern]) -> pl.DataFrame:
    """Lines that contain at least one literal of at least one pattern."""
    literals = sorted({lit for p in patterns for lit in p.literals})
    if not literals or lines.is_empty():
        return lines.clear()
    return lines.filter(pl.col("text").str.contains_any(literals))


def _possible(candidates: pl.DataFrame, patterns: Sequence[Pattern]) -> list[Pattern]:
    """The patterns one of whose literals occurs in some candidate line."""
    literals = sorted({lit for p in patterns for lit in p.literals})
    present = set(candidates["text"].str.extract_many(literals, overlapping=True).explode().drop_nulls().unique().to_list())
    return [p for p in patterns if any(lit in present for lit in p.literals)]


def match_pattern(candidates: pl.DataFrame, pattern: Pattern) -> pl.DataFrame:
    """Rows of `candidates` matched by `pattern`, as findings (captures as JSON)."""
    has_literal = pl.any_horizontal([pl.col("text").str.contains(lit, literal=True) for lit in pattern.literals])
    hits = candidates.filter(has_literal).filter(pl.col("text").str.contains(pattern.regex))
    if hits.is_empty():
        return empty(FINDINGS)
    captures = pl.col("text").str.extract_groups(pattern.regex)
    if "(?P<" in pattern.regex:
        captures_json = captures.struct.json_encode()
    else:
        captures_json = pl.lit("{}")
    if "(?P<rank>" in pattern.regex:  # a launcher line naming the rank it reports on
        named = captures.struct.field("rank").cast(pl.Int32, strict=False)
        hits = hits.with_columns(rank=pl.coalesce("rank", named) if "rank" in hits.columns else named)
    hits = hits.with_columns(
        pattern=pl.lit(pattern.id),
        title=pl.lit(pattern.title),
        category=pl.lit(pattern.category),
        severity=pl.lit(pattern.severity),
        role=pl.lit(pattern.role),
        captures=captures_json,
    )
    return conform(hits, FINDINGS)


def match_catalog(lines: pl.DataFrame, patterns: Sequence[Pattern]) -> pl.DataFrame:
    """All findings of all patterns over `lines` (needs `text`, `file`, `line`).

    A generic pattern's finding is dropped on a line that a specific pattern explains:
    the family speaks only for messages the catalog has never seen. A specific event
    explains a line for a generic event only; a failure family still speaks on a line
    that a specific pattern merely notes as an event or as the launcher's teardown (two
    messages run together on one line). A match on a line whose handler says
    it ignored the error and went on (HANDLED) is kept as an event: nothing stopped there.
    """
    candidates = prefilter(lines, patterns)
    if candidates.is_empty():
        return empty(FINDINGS)
    found = pl.concat([empty(FINDINGS)] + [match_pattern(candidates, p) for p in _possible(candidates, patterns)], how="vertical")
    generic = [p.id for p in patterns if p.tier == "generic"]
    if generic:
        is_generic = pl.col("pattern").is_in(generic)
        specific = found.filter(~is_generic)
        by_failure = specific.filter(~pl.col("role").is_in(["event", "teardown"])).select("file", "line").unique()
        by_event = specific.filter(pl.col("role") == "event").select("file", "line").unique()
        families = found.filter(is_generic).join(by_failure, on=["file", "line"], how="anti")
        generic_events = families.filter(pl.col("role") == "event").join(by_event, on=["file", "line"], how="anti")
        found = pl.concat([specific, families.filter(pl.col("role") != "event"), generic_events])
    handled = pl.col("text").str.contains(HANDLED)
    found = found.with_columns(
        role=pl.when(handled).then(pl.lit("event")).otherwise("role"),
        severity=pl.when(handled).then(pl.lit("info")).otherwise("severity"),
    )
    return found.sort(["file", "line", "pattern"])
