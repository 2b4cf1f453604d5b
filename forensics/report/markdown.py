"""postmortem.md: the verdict, what to do now, then the evidence that supports it, then everything else.

Renders what the verdict and passes produced; computes nothing new. Every claim cites
`file:line`. Long tables (1,024 ranks) are summarized, never listed in full.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics.analysis import Analysis
from forensics.ingest import condense
from forensics.report.markup import cell, code, code_block, duration, plural, prose, ranges, table, where
from forensics.schema import RANK_ALIVE

MAX_RANK_ROWS = 32
MAX_CONTEXT_LINES = 30
MAX_IMMEDIATE = 3  # what to do now: the first three things, not a list to wade through
RANK_STATUS_LEGEND = (
    "Status is what a rank's own lines show: `killed` by a signal, `crashed` on its own error, `stalled` "
    "short of a collective the others entered, `timed_out` waiting for others, `exited` non-zero with no "
    "cause of its own, `silent` (no line, or it stopped stepping while others went on), `finished` "
    "(a completion line), `running` (still logging when the logs end; it may have been torn down with the job)."
)


def _headline(analysis: Analysis) -> list[str]:
    v = analysis.verdict
    out = [f"# Postmortem: {code(analysis.incident.name or analysis.incident.root.name)}", ""]
    out.append(f"**Verdict: `{v.category}`** ({v.state}, confidence {v.confidence:.2f}) — {prose(v.summary)}")
    out.append("")
    facts = []
    if v.culprit_ranks:
        facts.append(f"- **Culprit {'rank' if len(v.culprit_ranks) == 1 else 'ranks'}:** {ranges(v.culprit_ranks)}")
    if v.culprit_hosts:
        facts.append(f"- **{'Host' if len(v.culprit_hosts) == 1 else 'Hosts'}:** {', '.join(cell(h) for h in v.culprit_hosts)}")
    for gpu in v.culprit_gpus:
        serial = f", serial {cell(gpu['serial'])}" if gpu.get("serial") else ""
        host = f"{cell(gpu['host'])} " if gpu.get("host") else ""
        facts.append(f"- **GPU:** {host}GPU {cell(gpu.get('gpu'))} (PCI {cell(gpu.get('pci_bus_id'))}{serial})")
    if v.first_failure:
        ff = v.first_failure
        when = ff.get("time") or (f"time UNKNOWN (after {ff['time_after']})" if ff.get("time_after") else "time UNKNOWN")
        quote = f": {code(_short(ff['text']))}" if (ff["text"] or "").strip() else ""  # a dump's sample row has no line text
        facts.append(f"- **First failure:** {where(ff['file'], ff['line'])} at {when}{quote}")
    if not v.culprit_ranks and v.category not in ("NO_FAILURE",):
        facts.append("- **Culprit rank:** UNKNOWN")
    if v.work_lost:
        facts.append(f"- **Work lost:** {_work_lost(v.work_lost)}")
    return out + facts + [""]


def _work_lost(lost: dict[str, Any]) -> str:
    """One sentence: the last checkpoint written before the failure, what was done since, and a
    save that began after it and did not finish."""
    reached = f" (the logs reach step {lost['last_step']})" if lost["last_step"] is not None else ""
    save, unfinished = lost["checkpoint"], lost["unfinished"]
    if save is None:
        said = f"UNKNOWN: no written checkpoint appears in the logs before the failure{reached}."
    else:
        since = [plural(lost["steps_lost"], "step")] if lost["steps_lost"] is not None else []
        if lost["seconds_lost"] is not None and not (lost["at_least"] and lost["seconds_lost"] < 1):
            since.append(("at least " if lost["at_least"] else "") + duration(lost["seconds_lost"]))
        at_step = f" at step {save['step']}" if save["step"] is not None else ""
        cost = f"; {' and '.join(since)} since then" if since else ""
        said = f"last checkpoint written {where(save['file'], save['line'])}{at_step}{cost}: {code(_short(save['text'], 200))}."
    if unfinished:
        said += f" A later save began at {where(unfinished['file'], unfinished['line'])} and shows no sign of finishing: {code(_short(unfinished['text'], 200))}."
    return said


def _short(text: str | None, limit: int = 300) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _triage(analysis: Analysis) -> list[str]:
    return ["## Triage", ""] + [f"- {prose(note)}" for note in analysis.verdict.triage] + [""]


def context_rows(analysis: Analysis, file: str, line: int | None) -> list[tuple[int, str]]:
    """(line, text) of the traceback/stack block around a cited line (or the lines next to it)."""
    lines = analysis.incident.lines
    if line is None or lines.is_empty():
        return []
    hit = lines.filter((pl.col("file") == file) & (pl.col("line") == line))
    if hit.is_empty():
        return []
    block, rank = hit["block"][0], hit["rank"][0]
    same_stream = (pl.col("rank") == rank) if rank is not None else pl.col("rank").is_null()
    context = lines.filter((pl.col("file") == file) & (pl.col("block") == block) & same_stream)
    if context.height <= 1:
        context = lines.filter((pl.col("file") == file) & pl.col("line").is_between(line - 3, line + 3))
    return context.sort("line").tail(MAX_CONTEXT_LINES).select("line", "text").rows()


def _context(analysis: Analysis, file: str, line: int | None) -> list[str]:
    """The context block of a cited line, numbered like an editor shows it."""
    return [f"{n:>6}  {t}" for n, t in context_rows(analysis, file, line)]


def _quote_or_title(evidence: dict) -> str:
    """The cited line as code; for a finding that quotes no line, what the tool concluded, in italics."""
    if (evidence["text"] or "").strip():
        return code(_short(evidence["text"], 200))
    return f"*{cell(_short(evidence['title'] or '', 200))}*"


PROOF_KINDS = {
    "completion": "a completion line",
    "last_step": "the announced last step reached",
    "progressing": "still stepping at the end of its log",
}
MAX_PROOF_ROWS = 8


def _proof_of_health(analysis: Analysis) -> list[str]:
    """The lines a NO_FAILURE verdict rests on, at most MAX_PROOF_ROWS of them."""
    proofs = analysis.verdict.proofs
    rows = [
        (where(p["file"], p["line"]), cell(p["rank"]), cell(PROOF_KINDS.get(p["kind"], p["kind"])), code(_short(p["text"], 200)))
        for p in proofs[:MAX_PROOF_ROWS]
    ]
    out = ["## Proof of health", "", table(["where", "rank", "proof", "line"], rows), ""]
    if len(proofs) > MAX_PROOF_ROWS:
        out += [f"… and {plural(len(proofs) - MAX_PROOF_ROWS, 'more proof line')} (all in verdict.json).", ""]
    return out


def _evidence(analysis: Analysis) -> list[str]:
    v = analysis.verdict
    if v.proofs:
        return _proof_of_health(analysis)
    if not v.hypotheses:
        return []
    top = v.hypotheses[0]
    out = ["## Evidence", ""]
    if v.first_failure:
        context = _context(analysis, v.first_failure["file"], v.first_failure["line"])
        if context:
            out += [f"First failure in {where(v.first_failure['file'], v.first_failure['line'])}:", "", code_block(context), ""]
    rows = [
        (where(e["file"], e["line"]), cell(e["rank"]), cell(e["time"]), cell(e["pattern"]), cell(e["role"]), _quote_or_title(e))
        for e in top.evidence
    ]
    out += [table(["where", "rank", "time", "pattern", "role", "line"], rows), ""]
    return out


def _timeline(analysis: Analysis) -> list[str]:
    """The first failure and its cascade: the earliest finding of each rank, in time order."""
    findings = analysis.incident.findings.filter(pl.col("role") != "event", pl.col("severity") != "info")
    if findings.is_empty():
        return []
    firsts = (
        findings.filter(pl.col("rank").is_not_null())
        .sort([pl.col("time").is_null(), "time", "file", "line"])
        .group_by("rank", maintain_order=True)
        .first()
    )
    unranked = findings.filter(pl.col("rank").is_null()).sort([pl.col("time").is_null(), "time"]).head(5)
    events = pl.concat([firsts.select(findings.columns), unranked]).sort([pl.col("time").is_null(), "time", "file", "line"])
    rows = []
    shown = events.head(20)
    for e in shown.iter_rows(named=True):
        when = e["time"].strftime("%Y-%m-%d %H:%M:%S") if e["time"] else "—"
        rows.append((when, cell(e["rank"]), cell(e["host"]), cell(e["title"]), cell(e["role"]), where(e["file"], e["line"])))
    out = ["## Timeline", "", "Earliest failure evidence per rank (cascade included), in time order:", ""]
    out += [table(["time (UTC)", "rank", "host", "event", "role", "where"], rows)]
    if events.height > shown.height:
        out.append(f"\n… and {events.height - shown.height} more ranks with later evidence (see verdict.json).")
    return out + [""]


def _hypotheses(analysis: Analysis) -> list[str]:
    hyps = analysis.verdict.hypotheses
    if len(hyps) < 2:
        return []
    rows = [
        (
            f"`{h.category}`",
            f"{h.score:.2f}",
            cell(ranges(h.culprit_ranks)) if h.culprit_ranks else "—",
            cell(h.summary, 200),
            where(h.evidence[0]["file"], h.evidence[0]["line"]) if h.evidence else "—",
        )
        for h in hyps
    ]
    return ["## Hypotheses considered", "", table(["category", "score", "ranks", "summary", "first evidence"], rows), ""]


def _ranks(analysis: Analysis) -> list[str]:
    ranks = analysis.incident.ranks
    if ranks.is_empty():
        return []
    out = ["## Ranks", ""]
    interesting = ranks.filter(~pl.col("status").is_in(RANK_ALIVE))
    if ranks.height <= MAX_RANK_ROWS:
        shown = ranks
    else:
        groups = ranks.group_by("status").agg(pl.col("rank"), pl.len()).sort("len", descending=True)
        rows = [(cell(s), str(n), cell(ranges(r), 300)) for s, r, n in groups.select("status", "rank", "len").iter_rows()]
        out += [f"{ranks.height} ranks, by status:", "", table(["status", "ranks", "which"], rows), ""]
        shown = interesting.head(MAX_RANK_ROWS)
        if shown.is_empty():
            return out
        out += [f"First {shown.height} ranks with something wrong in their own lines:", ""]
    rows = []
    for r in shown.iter_rows(named=True):
        last = r["last_time"].strftime("%H:%M:%S") if r["last_time"] else "—"
        first_error = (
            f"{where(r['first_error_file'], r['first_error_line'])} {cell(r['first_error_pattern'])}" if r["first_error_file"] else "—"
        )
        rows.append((str(r["rank"]), cell(r["host"]), cell(r["status"]), cell(r["last_step"]), last, first_error))
    out += [table(["rank", "host", "status", "last step", "last line at", "first error"], rows), "", RANK_STATUS_LEGEND, ""]
    return out


def _fixes(analysis: Analysis) -> list[str]:
    v = analysis.verdict
    if not v.hypotheses:
        return []
    fixes = v.hypotheses[0].fixes
    out = ["## What to do now", ""] + [f"{i}. {prose(f)}" for i, f in enumerate(fixes["immediate"][:MAX_IMMEDIATE], start=1)]
    out += ["", "## How to prevent it", ""] + [f"- {prose(f)}" for f in fixes["structural"]]
    return out + [""]


def _whys(analysis: Analysis) -> list[str]:
    v = analysis.verdict
    if not v.whys:
        return []
    chain = [w if w.startswith(("Why ", "What ")) else f"Why? {w}" for w in v.whys]  # a playbook's why has no question
    out = ["## Five Whys", ""] + [f"{i}. {prose(w, 600)}" for i, w in enumerate(chain, start=1)]
    if v.checklist:
        out += ["", "## Prevention checklist", ""] + [f"- [ ] {prose(c, 300)}" for c in v.checklist]
    return out + [""]


def _unmatched(analysis: Analysis) -> list[str]:
    frame = analysis.unmatched
    if frame.is_empty():
        return []
    rows = [
        (str(r["count"]), str(r["ranks"]), where(r["file"], r["line"]), code(_short(r["text"], 200))) for r in frame.iter_rows(named=True)
    ]
    out = ["## Unmatched error lines", "", "Error-like lines no pattern explains, clustered by template (most frequent first):", ""]
    return out + [table(["count", "ranks", "first seen", "example"], rows), ""]


def _inputs(analysis: Analysis) -> list[str]:
    inputs = analysis.incident.inputs.sort("path")
    counts = inputs.group_by("status").len().sort("status")
    summary = ", ".join(f"{n} {s}" for s, n in counts.iter_rows())
    rows = [
        (code(r["path"]), code(r["kind"]), cell(r["rank"]), cell(r["status"]), cell(r["lines"]), cell(r["problem"]))
        for r in inputs.head(200).iter_rows(named=True)
    ]
    out = ["## Inputs", "", f"{plural(inputs.height, 'file')}: {summary}.", ""]
    out += _condensed(inputs)
    for error in analysis.incident.step_errors:
        out += [f"- **An analysis step failed** (the rest of the report stands without it): {cell(error, 300)}"]
    if analysis.incident.step_errors:
        out.append("")
    out += [table(["file", "kind", "rank", "status", "lines", "problem"], rows)]
    if inputs.height > 200:
        out.append(f"\n… {inputs.height - 200} more files (all listed in verdict.json).")
    return out + [""]


def _condensed(inputs: pl.DataFrame) -> list[str]:
    """The sentence that says which large files were analyzed in part, and what that misses."""
    cut = inputs.filter(pl.col("lines_kept") < pl.col("lines"))
    if cut.is_empty():
        return []
    read, kept = int(cut["lines"].sum()), int(cut["lines_kept"].sum())
    return [
        f"Condensed as read ({plural(cut.height, 'large file')}): {kept:,} of {read:,} lines kept: failure lines with"
        f" the {condense.BEFORE_HIT} lines before and {condense.AFTER_HIT} after them, warnings and launcher notes,"
        f" the first {condense.HEAD_LINES} and last {condense.TAIL_LINES:,} lines of each file, and training-metric"
        " lines at an even stride. A loss spike or a slow step that falls between two kept metric lines is not seen.",
        "",
    ]


def _extra_sections(sections: list[str]) -> list[str]:
    out: list[str] = []
    for text in sections:
        out += [text.rstrip(), ""]
    return out


def _figures(figures: list[Any]) -> list[str]:
    if not figures:
        return []
    return ["## Figures", ""] + [f"![{cell(p.stem)}](figures/{p.name})" for p in figures] + [""]


def render_markdown(analysis: Analysis, figures: list[Any] | None = None, sections: list[str] | None = None) -> str:
    """The postmortem; `sections` are extra markdown blocks (collectives, GPU, traces) rendered by their steps."""
    parts = (
        _headline(analysis)
        + _fixes(analysis)
        + _triage(analysis)
        + _evidence(analysis)
        + _timeline(analysis)
        + _hypotheses(analysis)
        + _ranks(analysis)
        + _whys(analysis)
        + _extra_sections(sections or [])
        + _figures(figures or [])
        + _unmatched(analysis)
        + _inputs(analysis)
    )
    return "\n".join(parts).rstrip() + "\n"
