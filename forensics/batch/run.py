"""Find incident folders under roots, analyze each in a worker, collect one index row each.

An incident is each immediate subdirectory of a ROOT (how incident archives are kept:
`incidents/2024-05-01-job123/`); a ROOT with no subdirectories is itself one incident.
Workers write each incident's report under OUT/incidents/<id>/ and return a small
summary row; a failing incident becomes a row with its error, never the end of the
batch.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INDEX_COLUMNS = (
    "id",
    "path",
    "category",
    "state",
    "confidence",
    "summary",
    "culprit_ranks",
    "culprit_hosts",
    "world_size",
    "start",
    "end",
    "first_failure_file",
    "first_failure_line",
    "error",
)


@dataclass(frozen=True)
class Job:
    incident_id: str
    path: Path
    out: Path
    pattern_dirs: tuple[Path, ...] = ()


def find_incidents(roots: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for root in roots:
        subdirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()) if root.is_dir() else []
        found += subdirs or ([root] if root.is_dir() else [])
    return found


def incident_id(path: Path, taken: set[str]) -> str:
    """A file-system-safe id from the folder name; a short hash keeps duplicates apart."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name).strip("._") or "incident"
    if base in taken:
        base = f"{base}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    taken.add(base)
    return base


def plan(roots: Iterable[Path], out: Path, pattern_dirs: tuple[Path, ...] = ()) -> list[Job]:
    taken: set[str] = set()
    return [Job(incident_id(p, taken), p, out / "incidents", pattern_dirs) for p in find_incidents(roots)]


def run_job(job: Job) -> dict[str, Any]:
    """Analyze one incident and write its report; always returns an index row."""
    from forensics.catalog import load_full
    from forensics.flow import analyze
    from forensics.output import write_report
    from forensics.report.verdict_json import verdict_document

    row: dict[str, Any] = {column: None for column in INDEX_COLUMNS}
    row.update(id=job.incident_id, path=str(job.path))
    try:
        analysis = analyze(job.path, load_full(job.pattern_dirs))
        write_report(analysis, job.out / job.incident_id)
    except Exception as exc:  # noqa: BLE001  one bad incident must not end a thousand-incident batch
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    document = verdict_document(analysis)
    verdict, incident = document["verdict"], document["incident"]
    first = verdict["first_failure"] or {}
    row.update(
        category=verdict["category"],
        state=verdict["state"],
        confidence=verdict["confidence"],
        summary=verdict["summary"],
        culprit_ranks=verdict["culprit_ranks"],
        culprit_hosts=verdict["culprit_hosts"],
        world_size=incident["world_size"],
        start=incident["start"],
        end=incident["end"],
        first_failure_file=first.get("file"),
        first_failure_line=first.get("line"),
    )
    return row


def run_local(jobs: list[Job], workers: int, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if workers <= 1:
        for n, job in enumerate(jobs, start=1):
            rows.append(run_job(job))
            progress(f"[{n}/{len(jobs)}] {job.incident_id}: {rows[-1]['category'] or rows[-1]['error']}")
        return rows
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_job, job): job for job in jobs}
        for n, future in enumerate(as_completed(futures), start=1):
            rows.append(future.result())
            progress(f"[{n}/{len(jobs)}] {futures[future].incident_id}: {rows[-1]['category'] or rows[-1]['error']}")
    return rows


def run_ray(jobs: list[Job], progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """The same work on a Ray cluster (`ray.init()` joins RAY_ADDRESS or starts a local one)."""
    import ray

    ray.init(ignore_reinit_error=True)
    remote = ray.remote(run_job)
    pending = {remote.remote(job): job for job in jobs}
    rows: list[dict[str, Any]] = []
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        job = pending.pop(done[0])
        rows.append(ray.get(done[0]))
        progress(f"[{len(rows)}/{len(jobs)}] {job.incident_id}: {rows[-1]['category'] or rows[-1]['error']}")
    return rows
