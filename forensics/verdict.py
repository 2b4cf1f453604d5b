"""Fuse all findings into ranked hypotheses and one verdict.

Notes:
    One hypothesis per category present among the failure findings. Its score adds:
    the strongest role it has (initiating 0.55, symptom 0.35, cascade 0.20, teardown
    0.10); how early its first initiating/symptom evidence is relative to the earliest
    in the incident (up to 0.30, halving every ~80 s, so cross-host clock skew of a few
    seconds barely matters); its worst severity (critical 0.10, error 0.05); and a small
    specificity bonus (schema.CATEGORY_SPECIFICITY) that breaks ties the way an engineer
    would: a dead GPU explains NCCL errors, a host OOM explains a SIGKILL.

    Lines without a timestamp are ordered by the last timestamp before them in the
    same file and rank ("order, not a made-up time"); evidence with no time at all
    cannot be ordered, so it competes on role and specificity alone.

    The crowd never wins by numbers: a thousand cascade timeouts score less than one
    initiating line. Culprits are the ranks holding the leading category's earliest
    evidence of its strongest role, unless (nearly) every rank holds it: then the cause is
    shared and no rank is named.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import Any

import polars as pl

from forensics.catalog.load import Derived, Pattern
from forensics.causal_chain import causal_chain
from forensics.run_state import run_state
from forensics.schema import CATEGORY_SPECIFICITY, SEVERITY_ORDER, Category
from forensics.triage import triage

# An unmatched line that says something failed: an exception raised, or a logger's ERROR level
# (detectron2 `ERROR [12/20 18:16:20 d2.engine.train_loop]: Exception during training:`).
RAISED_OR_LOGGED_ERROR = r"(?:Error|Exception): |\bERROR(?: \[| - | \| )"

ROLE_WEIGHT = {"initiating": 0.55, "symptom": 0.35, "cascade": 0.20, "teardown": 0.10}
SEVERITY_WEIGHT = {"critical": 0.10, "error": 0.05, "warning": 0.0}
EARLINESS_MAX = 0.30
EARLINESS_HALF_LIFE_S = 80.0
MAX_EVIDENCE = 12
# When at least this many ranks, and this share of the ranks the job had, fail the same
# way first-hand, the cause is shared (config, data, environment): no single culprit.
JOB_WIDE_MIN_RANKS = 3
JOB_WIDE_SHARE = 0.75


@dataclass
class Hypothesis:
    category: str
    score: float
    summary: str
    culprit_ranks: list[int]
    culprit_hosts: list[str]
    culprit_gpus: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    fixes: dict[str, list[str]]
    first: dict[str, Any] | None = None
    roles: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    category: str
    state: str
    summary: str
    confidence: float
    culprit_ranks: list[int]
    culprit_hosts: list[str]
    culprit_gpus: list[dict[str, Any]]
    first_failure: dict[str, Any] | None
    hypotheses: list[Hypothesis]
    whys: list[str]
    checklist: list[str]
    triage: list[str]
    proofs: list[dict[str, Any]] = field(default_factory=list)  # for NO_FAILURE: the lines that prove health
    work_lost: dict[str, Any] | None = None  # passes.work_lost: the last checkpoint before the failure


def load_playbooks() -> dict[str, dict[str, Any]]:
    text = resources.files("forensics").joinpath("data/playbooks.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _ordered(findings: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Add `order_time`: the finding's time, else the last time seen before it in its stream."""
    if lines.is_empty():
        return findings.with_columns(order_time=pl.col("time"))
    stream_time = (
        lines.select("file", "line", "rank", "time")
        .with_columns(order_time=pl.col("time").forward_fill().over(["file", pl.col("rank").fill_null(-1)], order_by="line"))
        .group_by(["file", "line"])
        .agg(pl.col("order_time").first())
    )
    return findings.join(stream_time, on=["file", "line"], how="left").with_columns(order_time=pl.coalesce("time", "order_time"))


def _summary(who: str, what: str) -> str:
    """`Rank 5 (node-a): CUDA out of memory ...` from the culprit's evidence; a title that
    already names its rank stands alone."""
    what = what.rstrip(". ") + "."
    if what.lower().startswith("rank "):
        return what[:1].upper() + what[1:]
    return what if who == "The job" else f"{who}: {what}"


def _evidence_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for row in frame.head(MAX_EVIDENCE).iter_rows(named=True):
        rows.append(
            {
                "file": row["file"],
                "line": row["line"],
                "rank": row["rank"],
                "host": row["host"],
                "time": _iso(row["time"]),
                "time_after": _iso(row.get("order_time")) if row["time"] is None else None,
                "text": row["text"],
                "pattern": row["pattern"],
                "title": row["title"],
                "role": row["role"],
            }
        )
    return rows


def _iso(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%S") + "Z" if value is not None else None


def _culprits(group: pl.DataFrame) -> pl.DataFrame:
    """Rows of the category's strongest role, keeping each rank's earliest."""
    best_role = min(group["role"].unique().to_list(), key=lambda r: -ROLE_WEIGHT.get(r, 0))
    strongest = group.filter(pl.col("role") == best_role)
    return strongest.sort([pl.col("order_time").is_null(), "order_time", "file", "line"])


def _gpus(rows: pl.DataFrame) -> list[dict[str, Any]]:
    gpus = (
        rows.filter(pl.col("gpu").is_not_null() | pl.col("pci_bus_id").is_not_null())
        .select("host", "gpu", "pci_bus_id", serial="gpu_serial")
        .unique(maintain_order=True)
    )
    return [dict(r) for r in gpus.iter_rows(named=True)]


def _advising(evidence: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """Patterns whose advice applies (the initiating and symptom evidence, never cascades or
    teardown), each with what its first line captured."""
    leading = evidence.filter(pl.col("role").is_in(["initiating", "symptom"])).unique("pattern", keep="first", maintain_order=True)
    return {row["pattern"]: _captured(row["captures"]) for row in leading.select("pattern", "captures").iter_rows(named=True)}


def _captured(captures: str | None) -> dict[str, Any]:
    try:
        values = json.loads(captures or "{}")
    except ValueError:
        return {}
    return values if isinstance(values, dict) else {}


PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _filled(fix: str, values: dict[str, Any]) -> str | None:
    """`fix` with each `{name}` replaced by the captured value, or None when one is missing:
    advice that names the requested size is given only where the size was read."""
    names = PLACEHOLDER.findall(fix)
    if any(values.get(name) in (None, "") for name in names):
        return None
    return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), fix)


STOP_WORDS = frozenset("a an and at for if in is it its of on or per the then to with".split())
SAME_ADVICE = 0.6  # share of the shorter fix's content words found in an earlier one


def _content_words(fix: str) -> set[str]:
    return {word.removesuffix("s") for word in re.findall(r"[a-z0-9]+", fix.lower())} - STOP_WORDS


def _add_new(fixes: list[str], candidates: Iterable[str]) -> None:
    """Append each candidate unless an earlier fix says the same (two patterns' wordings of one advice)."""
    for fix in candidates:
        words = _content_words(fix)
        if not any(len(words & _content_words(f)) >= SAME_ADVICE * min(len(words), len(_content_words(f))) for f in fixes):
            fixes.append(fix)


def _fixes(patterns: dict[str, Pattern | Derived], advising: dict[str, dict[str, Any]], playbook: dict[str, Any]) -> dict[str, list[str]]:
    immediate: list[str] = []
    structural: list[str] = []
    for pid, values in advising.items():
        pattern = patterns.get(pid)
        if pattern:
            filled = (_filled(fix, values) for fix in pattern.immediate)
            _add_new(immediate, (fix for fix in filled if fix))
            _add_new(structural, pattern.structural)
    # The category playbook only fills in where the matched patterns say little.
    if len(immediate) < 3:
        _add_new(immediate, playbook.get("immediate", []))
    if len(structural) < 3:
        _add_new(structural, playbook.get("structural", []))
    return {"immediate": immediate[:6], "structural": structural[:6]}


def _who(ranks: list[int], hosts: list[str]) -> str:
    if not ranks:
        return "The job"
    shown = ", ".join(str(r) for r in ranks[:4]) + (f" and {len(ranks) - 4} more" if len(ranks) > 4 else "")
    noun = "Rank" if len(ranks) == 1 else "Ranks"
    where = f" ({', '.join(hosts[:3])})" if hosts else ""
    return f"{noun} {shown}{where}"


def build_hypotheses(
    findings: pl.DataFrame, lines: pl.DataFrame, patterns: dict[str, Pattern | Derived], playbooks: dict[str, Any]
) -> list[Hypothesis]:
    failures = findings.filter(pl.col("role") != "event", pl.col("severity") != "info")
    if failures.is_empty():
        return []
    failures = _ordered(failures, lines)
    leading = failures.filter(pl.col("role").is_in(["initiating", "symptom"]))
    t0 = leading["order_time"].min() if not leading.is_empty() else None

    # Ranks the job had at least: every rank below the highest that left a line or that a finding
    # names (a stall report naming ranks 25-115 shows a job of at least 116).
    highest = [frame["rank"].max() for frame in (lines, failures) if not frame.is_empty()]
    ranks_seen = max((int(r) + 1 for r in highest if r is not None), default=0)
    hypotheses = []
    for (category,), group in failures.group_by("category", maintain_order=True):
        best_role = max(ROLE_WEIGHT.get(r, 0) for r in group["role"].unique())
        worst = max(group["severity"].unique().to_list(), key=lambda s: SEVERITY_ORDER.get(s, 0))
        lead = group.filter(pl.col("role").is_in(["initiating", "symptom"]))
        earliness = 0.0
        if not lead.is_empty():
            first_time = lead["order_time"].min()
            if first_time is None or t0 is None:
                earliness = EARLINESS_MAX - 0.001
            else:
                delay = max((first_time - t0).total_seconds(), 0.0)
                earliness = EARLINESS_MAX * math.pow(0.5, delay / EARLINESS_HALF_LIFE_S)
        score = best_role + earliness + SEVERITY_WEIGHT.get(worst, 0) + 0.004 * CATEGORY_SPECIFICITY.get(category, 0)

        culprit_rows = _culprits(group)
        agnostic = [pid for pid, p in patterns.items() if p.rank_agnostic]
        ranks = [
            int(r)
            for r in culprit_rows.filter(~pl.col("pattern").is_in(agnostic))["rank"].drop_nulls().unique(maintain_order=True).to_list()
        ]
        if best_role < ROLE_WEIGHT["symptom"]:
            ranks = []  # the crowd alone does not name a culprit
        if len(ranks) >= JOB_WIDE_MIN_RANKS and len(ranks) >= JOB_WIDE_SHARE * ranks_seen:
            ranks = []  # every rank failed the same way first-hand: a shared cause, not one rank
        if category == Category.ENVIRONMENT:
            ranks = []  # a setup, install or launch problem is the job's, whichever rank reports it
        hosts = [h for h in culprit_rows["host"].drop_nulls().unique(maintain_order=True).to_list()]
        # A fault of a host itself (a port down, with no rank of its own) names that host; the
        # ranks that report the network errors it causes are its victims, wherever they run.
        host_faults = [pid for pid, p in patterns.items() if getattr(p, "host_fault", False)]
        host_level = culprit_rows.filter(pl.col("pattern").is_in(host_faults) & pl.col("host").is_not_null())
        if not host_level.is_empty():
            hosts = host_level["host"].unique(maintain_order=True).to_list()
            on_hosts = culprit_rows.filter(pl.col("host").is_in(hosts))["rank"].drop_nulls().cast(pl.Int64).to_list()
            ranks = [r for r in ranks if r in on_hosts]
        evidence_frame = group.sort(
            [pl.col("role").replace_strict(ROLE_WEIGHT, default=0.0), pl.col("order_time").is_null(), "order_time", "file", "line"],
            descending=[True, False, False, False, False],
        )
        playbook = playbooks.get(category, {})
        first = _evidence_rows(culprit_rows.head(1))
        hypotheses.append(
            Hypothesis(
                category=category,
                score=round(min(score, 1.0), 3),
                summary=_summary(_who(ranks, hosts), first[0]["title"] if first else playbook.get("what", "failed")),
                culprit_ranks=ranks,
                culprit_hosts=hosts,
                culprit_gpus=_gpus(culprit_rows),
                evidence=_evidence_rows(evidence_frame),
                fixes=_fixes(patterns, _advising(evidence_frame), playbook),
                first=first[0] if first else None,
                roles=group["role"].unique().sort().to_list(),
            )
        )
    return sorted(hypotheses, key=lambda h: (-h.score, h.category))


def _corroborates(other: Hypothesis, top: Hypothesis) -> bool:
    """A less specific hypothesis about the same ranks supports the top one (the OOM'd rank
    also exited first; its peers timed out) rather than competing with it."""
    if other.category == Category.UNKNOWN:
        return True  # bare exit codes and unmatched errors say that something failed, not what
    less_specific = CATEGORY_SPECIFICITY.get(other.category, 0) < CATEGORY_SPECIFICITY.get(top.category, 0)
    return less_specific and set(other.culprit_ranks) <= set(top.culprit_ranks)


GENERIC_TIER_FACTOR = 0.85  # a message family, not a known message: less sure of the exact cause
UNKNOWN_FACTOR = 0.6


def _confidence(hypotheses: list[Hypothesis], patterns: dict[str, Pattern | Derived]) -> float:
    """Top score, discounted by how close the strongest competing hypothesis comes and by
    how specific its evidence is (a known message, a message family, or no category)."""
    top = hypotheses[0]
    competitors = [h for h in hypotheses[1:] if not _corroborates(h, top)]
    runner_up = competitors[0].score if competitors else 0.0
    margin = (top.score - runner_up) / top.score if top.score else 0.0
    cited = {e["pattern"] for e in top.evidence}
    generic = all(pid in patterns and patterns[pid].tier == "generic" for pid in cited)
    factor = UNKNOWN_FACTOR if top.category == Category.UNKNOWN else (GENERIC_TIER_FACTOR if generic else 1.0)
    return round(min(0.99, top.score * (0.6 + 0.4 * margin) * factor), 2)


def _cascade_note(findings: pl.DataFrame, culprits: list[int], category: str) -> str:
    if category == Category.ENVIRONMENT:
        reporting = findings.filter(pl.col("category") == category, pl.col("role") != "event")["rank"].drop_nulls().n_unique()
        return f" {reporting} ranks reported it: a problem of the job's setup, not of one rank." if reporting > 1 else ""
    crowd = findings.filter(pl.col("role").is_in(["cascade"]) & pl.col("rank").is_not_null())
    others = crowd.filter(~pl.col("rank").is_in(culprits))["rank"].n_unique() if not crowd.is_empty() else 0
    if not others:
        return ""
    plural = "s" if others != 1 else ""
    if not culprits:
        return f" {others} rank{plural} reported it; the rank that started it is UNKNOWN."
    return f" {others} other rank{plural} then failed in cascade."


def _weak(hypothesis: Hypothesis, findings: pl.DataFrame) -> bool:
    """An UNKNOWN hypothesis resting only on warnings (a run that stopped short of its total)."""
    if hypothesis.category != Category.UNKNOWN:
        return False
    cited = {(e["file"], e["line"]) for e in hypothesis.evidence}
    rows = findings.filter(pl.col("category") == Category.UNKNOWN, pl.col("role") != "event")
    severities = {sev for file, line, sev in rows.select("file", "line", "severity").iter_rows() if (file, line) in cited}
    return severities <= {"warning", "info"}


# Neither failure nor health can be shown: say so, and say what would settle it.
NO_EVIDENCE = {
    "whys": [
        "No line shows a failure, and no line proves the run ended well "
        "(no completion message, no exit code 0, the logs do not show training steps up to their end).",
        "The logs may stop before the problem, or the failure left no message (a kill, a hang, a lost node).",
    ],
    "checklist": [
        "Collect every rank's full log (torchrun --log-dir / --tee), not an excerpt",
        "Collect the launcher's or scheduler's exit codes and `dmesg -T` of each host",
        "Log a completion line and the step count at the end of training",
    ],
}


def _ranks_by_known_category(findings: pl.DataFrame, patterns: dict[str, Pattern | Derived]) -> list[set[int]]:
    """For each known failure category present: the ranks with a catalog message of it, any
    role (a message says what happened; a context inferred from traceback frames does not)."""
    messages = [pid for pid, pattern in patterns.items() if isinstance(pattern, Pattern)]
    known = findings.filter(
        (pl.col("role") != "event")
        & (pl.col("severity") != "info")
        & ~pl.col("category").is_in([Category.UNKNOWN, Category.NO_FAILURE])
        & pl.col("pattern").is_in(messages)
    )
    grouped = known.filter(pl.col("rank").is_not_null()).group_by("category").agg(pl.col("rank").unique())
    return [set(ranks) for ranks in grouped["rank"].to_list()]


def _said_on_its_ranks(hypothesis: Hypothesis, known_ranks: list[set[int]]) -> bool:
    """An UNKNOWN failure (a bare exit, an abort) on ranks that all logged one known category:
    that line says what failed there (the watchdog's timeout before its abort)."""
    ranks = set(hypothesis.culprit_ranks)
    return bool(ranks) and any(ranks <= known for known in known_ranks)


# The interpreter's own report of a crash signal (faulthandler). SIGABRT is left out: the NCCL
# watchdog and C++ terminate raise it on purpose, after a failure elsewhere.
OWN_CRASH_SIGNAL = r"Fatal Python error: (?:Segmentation fault|Floating point exception|Illegal instruction|Bus error)"


def _crashed_on_its_own_signal(hypothesis: Hypothesis) -> bool:
    return any(re.search(OWN_CRASH_SIGNAL, e["text"] or "") for e in hypothesis.evidence)


def _only_cut_tracebacks(hypothesis: Hypothesis) -> bool:
    return all(e["pattern"] == "EXC002" for e in hypothesis.evidence)


PROOF_FIELDS = ("kind", "file", "line", "rank", "text")


def _health_confidence(proofs: pl.DataFrame, doubts: int) -> float:
    """More independent kinds of proof, more confidence; each weak doubt costs some."""
    kinds = proofs["kind"].n_unique() if not proofs.is_empty() else 0
    return round(max(0.3, min(0.95, 0.55 + 0.15 * kinds - 0.1 * doubts)), 2)


def decide(
    findings: pl.DataFrame,
    lines: pl.DataFrame,
    ranks: pl.DataFrame,
    unmatched: pl.DataFrame,
    patterns: dict[str, Pattern | Derived],
    world: int | None,
    proofs: pl.DataFrame | None = None,
) -> Verdict:
    """The verdict: the leading hypothesis, or NO_FAILURE on proof of health, else UNKNOWN.

    NO_FAILURE needs a proof of health (passes.health); without one, an incident with no
    failure evidence is UNKNOWN with state `unknown`. An UNKNOWN hypothesis resting only
    on warnings never outranks a real category, and yields to a proof of health; any
    UNKNOWN hypothesis yields to a known category that has initiating evidence, or that
    has a line of any role on every rank the UNKNOWN one names.
    """
    playbooks = load_playbooks()
    proofs = proofs if proofs is not None else pl.DataFrame(schema={"kind": pl.String})
    hypotheses = build_hypotheses(findings, lines, patterns, playbooks)
    weak = [h for h in hypotheses if _weak(h, findings)]
    strong = [h for h in hypotheses if h not in weak]
    if not strong:
        cited: list[dict[str, Any]] = []
        crashed_lines = unmatched.filter(pl.col("template").str.contains(RAISED_OR_LOGGED_ERROR))
        if crashed_lines.is_empty() and not proofs.is_empty():
            category, state = Category.NO_FAILURE, "healthy"
            first = None
            kinds = ", ".join(sorted(set(proofs["kind"].to_list())))
            summary = f"No failure evidence, and proof of health ({kinds})."
            confidence = _health_confidence(proofs, len(weak))
            cited = proofs.select(PROOF_FIELDS).to_dicts()
        elif not crashed_lines.is_empty():
            category, state = Category.UNKNOWN, "crashed"
            first_row = crashed_lines.sort(["file", "line"]).row(0, named=True)
            first = {"rank": None, "time": None, "file": first_row["file"], "line": first_row["line"], "text": first_row["text"]}
            summary = "The job failed with errors no known signature explains; see the unmatched error lines."
            confidence = 0.3
        else:
            category, state = Category.UNKNOWN, "unknown"
            first = (
                {k: weak[0].first[k] for k in ("rank", "time", "time_after", "file", "line", "text")} if weak and weak[0].first else None
            )
            summary = (
                weak[0].summary + " No failure signature and no proof that the run ended well."
                if weak
                else "No failure signature, but no proof of health either (no completion line, no progress to the end of the logs)."
            )
            confidence = 0.3 if weak else 0.2
        playbook = playbooks[category] if first or category == Category.NO_FAILURE else NO_EVIDENCE
        return Verdict(
            category=category, state=state, summary=summary, confidence=confidence,
            culprit_ranks=[], culprit_hosts=[], culprit_gpus=[], first_failure=first, hypotheses=hypotheses,
            whys=playbook["whys"], checklist=playbook["checklist"], triage=triage(category, first, lines, ranks, world, state),
            proofs=cited,
        )  # fmt: skip
    explained = any(h.category != Category.UNKNOWN and "initiating" in h.roles for h in strong)
    known_ranks = _ranks_by_known_category(findings, patterns)
    # A known failure explains the bare exits and unrecognized errors next to it, and so does
    # any known line on the very ranks that exited; a traceback cut before its exception
    # line (EXC002) says less than any known message.
    strong = sorted(
        strong,
        key=lambda h: h.category == Category.UNKNOWN and (explained or _only_cut_tracebacks(h) or _said_on_its_ranks(h, known_ranks)),
    )
    # A process that crashed on its own signal was not killed from outside: a report that it
    # "died or was killed" (a launcher, Ray) is the crash seen from outside.
    if not explained and any(_crashed_on_its_own_signal(h) for h in strong):
        strong = sorted(strong, key=lambda h: h.category == Category.PROCESS_KILLED and "initiating" not in h.roles)
    hypotheses = strong + weak
    top = hypotheses[0]
    playbook = playbooks.get(top.category, {})
    first = None
    if top.first:
        first = {k: top.first[k] for k in ("rank", "time", "time_after", "file", "line", "text")}
    summary = top.summary + _cascade_note(findings, top.culprit_ranks, top.category)
    state = run_state(
        top.category, ranks, findings, top.culprit_ranks, frozenset(pid for pid, p in patterns.items() if getattr(p, "waits", False))
    )
    return Verdict(
        category=top.category,
        state=state,
        summary=summary,
        confidence=_confidence(hypotheses, patterns),
        culprit_ranks=top.culprit_ranks,
        culprit_hosts=top.culprit_hosts,
        culprit_gpus=top.culprit_gpus,
        first_failure=first,
        hypotheses=hypotheses,
        whys=causal_chain(top.category, top.first, top.culprit_ranks, findings, patterns, playbook, state) or playbook.get("whys", []),
        checklist=playbook.get("checklist", []),
        triage=triage(top.category, first, lines, ranks, world, state, top.culprit_ranks),
    )
