"""The whole flow for one incident: load (discover -> read) then analyze (match -> passes -> verdict).

Each stage is a plain function over frames; this module only sequences them, reports
progress, and keeps one failing optional source (a trace, a GPU dump) from taking the
rest of the analysis down with it: its files become `partial`/`skipped` with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from forensics import sources
from forensics.analysis import Analysis, InputError
from forensics.catalog.load import Catalog, load_full
from forensics.catalog.match import match_catalog
from forensics.checklist import prevention_checklist
from forensics.discover import discover, rank_from_name
from forensics.incident import FileStatus, Incident
from forensics.ingest.condense import WORDS_ONLY, Keep
from forensics.ingest.metrics import extract_metrics
from forensics.ingest.rank_logs import TextFile, read_text_files
from forensics.passes.cross_rank import rank_table, world_size
from forensics.passes.gpu_identity import with_gpu_serials
from forensics.passes.templates import unmatched_error_templates
from forensics.passes.verbatim import quote_lines
from forensics.passes.work_lost import work_lost
from forensics.schema import InputKind, InputStatus, Role
from forensics.steps.common import Step
from forensics.verdict import decide

STILL_GOING = ("healthy", "slow")  # states that lose no work; every other one may have lost all since the last checkpoint
# Read as lines: logs, and the cluster tools' text outputs, whose readers work on those lines.
TEXT_KINDS = (
    InputKind.RANK_LOG, InputKind.CONSOLE_LOG, InputKind.NCCL_LOG, InputKind.KERNEL_LOG,
    InputKind.LSPCI, InputKind.DCGMI, InputKind.IBSTAT, InputKind.NCCL_TESTS,
)  # fmt: skip

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def ingest_text(incident: Incident, keep: Keep = WORDS_ONLY) -> None:
    """Read the incident's pending text files into `lines`; large files keep what `keep` names."""
    pending = incident.inputs.filter(pl.col("kind").is_in([str(k) for k in TEXT_KINDS]) & pl.col("status").is_null())
    files = []
    for path in pending["path"].to_list():
        rank, local = rank_from_name(path)
        files.append(TextFile(path, rank, local))
    lines, statuses, conflicts = read_text_files(incident.root, files, keep)
    incident.lines = lines
    incident.apply_statuses(statuses)
    incident.add_findings(conflicts)


def load_incident(root: Path, progress: Progress = _quiet, catalog: Catalog | None = None) -> Incident:
    """Discover and read an incident (a folder, or one log file) into its frames.

    Leaves `inputs`, `lines` and the readers' tables filled; findings hold only what
    reading itself found (rank claims that disagree, traces with problems). Large text
    files keep the lines holding `catalog`'s literals (default: the built-in catalog)
    with their context. Raises InputError when there is nothing to analyze.
    """
    root = Path(root)
    if not root.exists():
        raise InputError(f"{root} does not exist")
    only = None
    if root.is_file():  # one log is an incident too: its folder, with nothing else in it read
        root, only = root.parent, root.name
    elif not root.is_dir():
        raise InputError(f"{root} is neither a file nor a directory")
    incident = Incident(root=root, name=Path(only).stem if only else root.name)

    progress(f"discovering files under {root}")
    with timed(incident, "discover"):
        incident.inputs = discover(root, only)
    if incident.inputs.is_empty():
        raise InputError(f"{root} contains no files")

    progress(f"reading {incident.inputs.height} files")
    catalog = catalog if catalog is not None else load_full()
    with timed(incident, "read text"):
        ingest_text(incident, kept_literals(catalog))
    for step in sources.SOURCES:
        run_isolated(step, incident, progress)
    _mark_unclaimed(incident)
    if incident.inputs.filter(pl.col("status") != InputStatus.SKIPPED).is_empty():
        raise InputError(f"nothing readable in {root} ({incident.inputs.height} files, all skipped)")
    return incident


def analyze_incident(incident: Incident, catalog: Catalog | None = None, progress: Progress = _quiet) -> Analysis:
    """Match the catalog, extract metrics, run the passes and decide the verdict.

    Fills the incident's `findings`, `metrics`, `ranks` and pass tables in place.
    """
    catalog = catalog if catalog is not None else load_full()
    progress(f"matching {len(catalog.patterns)} patterns over {incident.lines.height:,} lines")
    with timed(incident, "match catalog"):
        incident.add_findings(match_catalog(incident.lines, catalog.patterns))
    with timed(incident, "metrics"):
        incident.metrics = extract_metrics(incident.lines)

    for step in sources.PASSES:
        run_isolated(step, incident, progress)
    with timed(incident, "ranks and templates"):
        incident.findings = with_gpu_serials(
            quote_lines(deduplicate(incident.findings), incident.lines), incident.tables.get("gpu_samples")
        )
        world = world_size(incident.lines, incident.findings)
        incident.ranks = rank_table(
            incident.lines, incident.findings, incident.metrics, world, incident.tables.get("rank_hosts"), incident.tables.get("health")
        )
        unmatched = unmatched_error_templates(incident.lines, incident.findings)

    progress("deciding the verdict")
    with timed(incident, "verdict"):
        patterns = catalog.entries_for(incident.findings["pattern"].unique().to_list())
        verdict = decide(
            incident.findings,
            incident.lines,
            incident.ranks,
            unmatched,
            patterns,
            world,
            incident.tables.get("health"),
        )
        verdict.checklist = prevention_checklist(verdict, incident, world, patterns)
        if verdict.state not in STILL_GOING:
            verdict.work_lost = work_lost(incident.findings, incident.metrics, verdict.first_failure)
    return Analysis(incident, verdict, catalog, world, unmatched)


def analyze(root: Path, catalog: Catalog | None = None, progress: Progress = _quiet) -> Analysis:
    """The whole flow for one incident folder or log file: load it, then analyze it."""
    catalog = catalog if catalog is not None else load_full()
    return analyze_incident(load_incident(root, progress, catalog), catalog, progress)


def kept_literals(catalog: Catalog) -> Keep:
    """What a large file keeps of the catalog: failure literals with context, event literals alone."""
    notes = {lit for p in catalog.patterns if p.role == Role.EVENT for lit in p.literals}
    failures = {lit for p in catalog.patterns if p.role != Role.EVENT for lit in p.literals} - notes
    return Keep(tuple(sorted(failures)), tuple(sorted(notes)))


@contextmanager
def timed(incident: Incident, stage: str) -> Iterator[None]:
    """Record the wall time of `stage` in `incident.timings` (for `--timings`)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        incident.timings.append((stage, time.perf_counter() - start))


def run_isolated(step: Step, incident: Incident, progress: Progress) -> None:
    """Run one step; if it fails, its files become `partial` with the reason, and we go on.

    This is a safety net for inputs no one foresaw, not error handling: the reason is
    kept in the inputs table so the failure is visible in every report.
    """
    try:
        with timed(incident, step.name):
            step.run(incident, progress)
    except Exception as exc:  # noqa: BLE001  a reader bug on odd input must not cost the whole postmortem
        reason = f"{step.name} step failed: {type(exc).__name__}: {str(exc)[:200]}"
        progress(reason)
        paths = incident.paths_of_kind(*step.kinds) if step.kinds else []
        incident.apply_statuses([FileStatus(p, InputStatus.PARTIAL, reason) for p in paths])
        incident.step_errors.append(reason)


def deduplicate(findings: pl.DataFrame) -> pl.DataFrame:
    """One finding per (file, line, category, role) and rank: keep the one that knows most (rank, GPU).

    The role stays in the key: one physical line can carry two messages (a progress bar that
    ended without a newline, then another rank's timeout), the busy rank's and the crowd's. So
    does a named rank: one report line can name several culprits (`[ready ranks: 0, 7, 3]`);
    a finding without a rank yields to any that names one.
    """
    key = ["file", "line", "category", "role"]
    cited = findings.filter(pl.col("line").is_not_null())
    uncited = findings.filter(pl.col("line").is_null())
    ranked = cited.filter(pl.col("rank").is_not_null())
    unranked = cited.filter(pl.col("rank").is_null()).join(ranked.select(key).unique(), on=key, how="anti", nulls_equal=True)
    kept = (
        pl.concat([ranked, unranked])
        .sort([pl.col("gpu").is_null(), pl.col("pci_bus_id").is_null(), "pattern"])
        .unique([*key, "rank"], keep="first", maintain_order=True)
    )
    return pl.concat([kept, uncited]).sort(["file", "line", "pattern"], nulls_last=True)


def _mark_unclaimed(incident: Incident) -> None:
    """Files no ingest module claimed stay visible in the inputs table, with the reason."""
    unclaimed = incident.inputs.filter(pl.col("status").is_null())
    incident.apply_statuses(
        [FileStatus(p, InputStatus.SKIPPED, f"no reader for kind '{k}' yet") for p, k in unclaimed.select("path", "kind").iter_rows()]
    )
