"""Find incident folders under roots, analyze each in a worker, collect one index row each.

An incident is a folder that holds artifacts directly (files, not only folders); its
subfolders (`traces/`, `nvidia-smi/`) are part of it. A folder that holds only folders is an
archive level and is searched further, so `incidents/2024/05/job-123/` works at any depth; a
ROOT that holds files is itself one incident. Hidden files and folders are skipped.
Workers write each incident's report under OUT/incidents/<id>/ and its evidence to
OUT/findings/<id>.parquet (batch/findings.py), and return a small summary row; a failing incident becomes a row with its error, never the end of the
batch. Locally each incident runs in a worker process (batch/worker.py, one per parallel
job, serving incidents one at a time) under a wall-clock timeout and an address-space cap: a
segfault, an exhausted memory or a hang is that incident's error, and the worker is replaced. Its row is kept next to its report with a fingerprint of its
files and of the tool; a re-run reuses the rows whose fingerprint still matches.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import resource
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics import __version__
from forensics.batch.manifest import Entry, with_meta
from forensics.catalog.load import default_catalog_dir

ROW_FILE = "batch-row.json"

INDEX_COLUMNS = (
    "id",
    "path",
    "category",
    "state",
    "confidence",
    "summary",
    "culprit_ranks",
    "culprit_hosts",
    "culprit_gpus",
    "culprit_gpu_serials",
    "hosts",
    "signature",
    "world_size",
    "start",
    "end",
    "first_failure_file",
    "first_failure_line",
    "first_failure_text",
    "cluster",
    "user",
    "model",
    "error",
)


@dataclass(frozen=True)
class Job:
    incident_id: str
    path: Path
    out: Path
    pattern_dirs: tuple[Path, ...] = ()
    meta: tuple[tuple[str, Any], ...] = ()  # a manifest's columns for this incident (batch/manifest.py)
    figures: bool = True  # draw the report's figures


def _visible(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and not p.is_symlink())
    except OSError:
        return []


def _incidents_under(root: Path) -> list[Path]:
    """Depth first, in path order, without recursion (an archive may nest deeper than Python's stack)."""
    found, pending = [], [root]
    while pending:
        folder = pending.pop()
        entries = _visible(folder)
        subdirs = [p for p in entries if p.is_dir()]
        if any(p.is_file() for p in entries) or not subdirs:
            found.append(folder)
        else:
            pending.extend(reversed(subdirs))
    return found


def find_incidents(roots: Iterable[Path]) -> list[Path]:
    """Incident folders under each root, in path order (see the module's docstring)."""
    return [found for root in roots if root.is_dir() for found in _incidents_under(root)]


def incident_id(path: Path, taken: set[str], root: Path | None = None, given: str | None = None) -> str:
    """A file-system-safe id: `given` (a manifest's), or the folder's path under its root
    (`2024_05_job-123`), or its name; a short hash keeps duplicates apart."""
    relative = path.relative_to(root) if root is not None and path != root and path.is_relative_to(root) else Path(path.name)
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", given or "_".join(relative.parts)).strip("._") or "incident"
    if base in taken:
        base = f"{base}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    taken.add(base)
    return base


def plan(
    roots: Iterable[Path], out: Path, pattern_dirs: tuple[Path, ...] = (), taken: set[str] | None = None, figures: bool = True
) -> list[Job]:
    """One job per incident folder under the roots; `taken` holds the ids already given out."""
    taken = set() if taken is None else taken
    return [
        Job(incident_id(p, taken, root), p, out / "incidents", pattern_dirs, figures=figures)
        for root in roots
        for p in find_incidents([root])
    ]


def plan_manifest(
    entries: list[Entry], out: Path, pattern_dirs: tuple[Path, ...] = (), taken: set[str] | None = None, figures: bool = True
) -> list[Job]:
    """One job per manifest row: its folder is the incident, whatever it holds."""
    taken = set() if taken is None else taken
    return [Job(incident_id(e.path, taken, given=e.incident_id), e.path, out / "incidents", pattern_dirs, e.meta, figures) for e in entries]


def _blank_row(job: Job) -> dict[str, Any]:
    """An index row that says only which incident it is."""
    return {column: None for column in INDEX_COLUMNS} | {"id": job.incident_id, "path": str(job.path)}


@functools.cache
def _catalog(pattern_dirs: tuple[Path, ...]) -> Any:
    """The catalog a job analyzes with, loaded once per process (a worker serves many jobs)."""
    from forensics.catalog import load_full

    return load_full(pattern_dirs)


def run_job(job: Job) -> dict[str, Any]:
    """Analyze one incident and write its report; always returns an index row."""
    from forensics.batch.findings import drop_incident_findings, write_incident_findings
    from forensics.flow import analyze
    from forensics.output import write_report
    from forensics.report.verdict_json import verdict_document

    row = _blank_row(job)
    try:
        analysis = analyze(job.path, _catalog(job.pattern_dirs))
        write_report(analysis, job.out / job.incident_id, figures=job.figures)
        write_incident_findings(job.out.parent, job.incident_id, analysis)
    except Exception as exc:  # noqa: BLE001  one bad incident must not end a thousand-incident batch
        drop_incident_findings(job.out.parent, job.incident_id)
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    document = verdict_document(analysis)
    verdict, incident = document["verdict"], document["incident"]
    first = verdict["first_failure"] or {}
    leading = document["hypotheses"][0]["evidence"] if document["hypotheses"] else []
    row.update(
        category=verdict["category"],
        state=verdict["state"],
        confidence=verdict["confidence"],
        summary=verdict["summary"],
        culprit_ranks=verdict["culprit_ranks"],
        culprit_hosts=verdict["culprit_hosts"],
        culprit_gpus=[_gpu_key(gpu, verdict["culprit_hosts"]) for gpu in verdict["culprit_gpus"]],
        culprit_gpu_serials=[gpu.get("serial") for gpu in verdict["culprit_gpus"]],  # one per culprit GPU, null where unknown
        hosts=incident["hosts"],
        signature=leading[0]["pattern"] if leading else None,
        world_size=incident["world_size"],
        start=incident["start"],
        end=incident["end"],
        first_failure_file=first.get("file"),
        first_failure_line=first.get("line"),
        first_failure_text=first.get("text"),
    )
    return row


def _gpu_key(gpu: dict[str, Any], culprit_hosts: list[str]) -> str:
    """`host:bus id` (or `host:GPU index`): one physical slot across incidents. A GPU whose dump
    names no host is on the incident's culprit host when there is exactly one; otherwise `?`."""
    where = gpu.get("pci_bus_id") or (f"GPU {gpu['gpu']}" if gpu.get("gpu") is not None else "GPU ?")
    host = gpu.get("host") or (culprit_hosts[0] if len(culprit_hosts) == 1 else "?")
    return f"{host}:{where}"


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 900.0
    memory_bytes: int = 8 << 30


def fingerprint(job: Job) -> str:
    """The tool's version and catalog, whether figures are drawn, and every file of the incident by
    path, size and mtime."""
    digest = hashlib.sha256(f"{__version__}\0{job.figures}\0".encode())
    catalogs = [default_catalog_dir(), *job.pattern_dirs]
    for folder in [job.path, *catalogs]:
        for base, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(files):
                path = Path(base, name)
                try:
                    stat = path.lstat()
                except OSError:
                    continue
                digest.update(f"{path.relative_to(folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _remembered(job: Job, print_: str) -> dict[str, Any] | None:
    try:
        saved = json.loads((job.out / job.incident_id / ROW_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("fingerprint") != print_ or not isinstance(saved.get("row"), dict):
        return None
    return None if saved["row"].get("error") else saved["row"]  # a failed incident is tried again


def _cap(memory_bytes: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return apply


RECYCLE_AFTER = 50  # incidents one worker process analyzes before a fresh one takes over


class Worker:
    """A `forensics.batch.worker` process that analyzes incidents one at a time (a JSON line in, a
    row out) under `limits`: the interpreter, Polars and the catalog load once, not per incident.

    An incident that kills the process, exhausts its memory cap or outlasts the timeout becomes
    a row with that error; the process is then replaced before the next incident. A process is
    also replaced after RECYCLE_AFTER incidents, so one incident's memory never weighs on many.
    """

    command = (sys.executable, "-m", "forensics.batch.worker")

    def __init__(self, limits: Limits, threads: int) -> None:
        self.limits, self.threads = limits, threads
        self.process: subprocess.Popen[str] | None = None
        self.served = 0

    def _start(self) -> subprocess.Popen[str]:
        self.stderr = tempfile.TemporaryFile()
        self.served = 0
        self.process = subprocess.Popen(
            list(self.command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            text=True, env=os.environ | {"POLARS_MAX_THREADS": str(self.threads)}, preexec_fn=_cap(self.limits.memory_bytes),
        )  # fmt: skip
        return self.process

    def stop(self) -> int | None:
        """End the process (killing it if it still runs); its exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.kill()
        code = self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            with contextlib.suppress(OSError):
                stream.close()
        self.process = None
        return code

    def _died(self, job: Job) -> dict[str, Any]:
        code = self.process.wait() if self.process is not None else None
        self.stderr.seek(0)
        last = (self.stderr.read().decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
        self.stop()
        if code is not None and code < 0:
            cause = f"killed by {signal.Signals(-code).name} (memory cap {self.limits.memory_bytes >> 30} GiB, --memory-gb, or a crash)"
            return _blank_row(job) | {"error": f"worker {cause}"}
        return _blank_row(job) | {"error": f"worker exited with code {code}: {last[:300]}"}

    def run(self, job: Job) -> dict[str, Any]:
        if self.process is not None and (self.process.poll() is not None or self.served >= RECYCLE_AFTER):
            self.stop()
        process = self.process or self._start()
        spec = {
            "incident_id": job.incident_id,
            "path": str(job.path),
            "out": str(job.out),
            "pattern_dirs": [str(p) for p in job.pattern_dirs],
            "figures": job.figures,
        }
        try:
            process.stdin.write(json.dumps(spec) + "\n")
            process.stdin.flush()
        except OSError:
            return self._died(job)
        ready, _, _ = select.select([process.stdout], [], [], self.limits.timeout_s)
        if not ready:
            self.stop()
            return _blank_row(job) | {"error": f"timed out after {self.limits.timeout_s:g} s (--timeout)"}
        answer = process.stdout.readline()
        if not answer:
            return self._died(job)
        self.served += 1
        try:
            return json.loads(answer)
        except ValueError:  # not a row: the conversation is lost, so is this worker
            self.stop()
            return _blank_row(job) | {"error": f"worker answered something other than a row: {answer[:200]!r}"}


def run_local(
    jobs: list[Job], workers: int, progress: Callable[[str], None], limits: Limits = Limits(), force: bool = False
) -> list[dict[str, Any]]:
    """Every job's row, each incident in its own process, `workers` at a time; rows whose
    fingerprint is unchanged since the last run are reused unless `force`."""
    prints = {job.incident_id: fingerprint(job) for job in jobs}
    rows = {job.incident_id: row for job in jobs if not force and (row := _remembered(job, prints[job.incident_id]))}
    todo = [job for job in jobs if job.incident_id not in rows]
    if rows:
        progress(f"{len(rows)} of {len(jobs)} incidents unchanged since the last run: reused")
    threads = max(1, (os.cpu_count() or 1) // max(workers, 1))
    started = time.monotonic()
    own, everyone = threading.local(), []

    def run_isolated(job: Job) -> dict[str, Any]:
        if not hasattr(own, "worker"):
            own.worker = Worker(limits, threads)
            everyone.append(own.worker)
        return own.worker.run(job)

    with ThreadPoolExecutor(max_workers=max(workers, 1)) as pool:
        futures = {pool.submit(run_isolated, job): job for job in todo}
        for n, future in enumerate(as_completed(futures), start=1):
            job = futures[future]
            row = rows[job.incident_id] = future.result()
            folder = job.out / job.incident_id
            folder.mkdir(parents=True, exist_ok=True)
            (folder / ROW_FILE).write_text(json.dumps({"fingerprint": prints[job.incident_id], "row": row}, default=str))
            rate = n / max(time.monotonic() - started, 1e-9)
            eta = (len(todo) - n) / rate
            progress(f"[{n}/{len(todo)}] {job.incident_id}: {row['category'] or row['error']} ({rate:.2f}/s, about {eta:.0f} s left)")
    for worker in everyone:
        worker.stop()
    return [with_meta(rows[job.incident_id], job.meta) for job in jobs]


RAY_RETRIES = 2  # a task whose worker died (node lost, OOM-killed) is run again this many times


def run_ray(jobs: list[Job], progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """The same work on a Ray cluster (`ray.init()` joins RAY_ADDRESS or starts a local one):
    one task per incident, one Polars thread per task, retried when its worker dies; a task
    that still fails is that incident's error row. Rows come back in job order."""
    import ray

    ray.init(ignore_reinit_error=True, runtime_env={"env_vars": {"POLARS_MAX_THREADS": "1"}})
    remote = ray.remote(max_retries=RAY_RETRIES)(run_job)
    pending = {remote.remote(job): job for job in jobs}
    rows: dict[str, dict[str, Any]] = {}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        job = pending.pop(done[0])
        try:
            row = ray.get(done[0])
        except Exception as exc:  # noqa: BLE001  a lost worker is this incident's error, not the batch's end
            row = _blank_row(job) | {"error": f"ray task failed: {type(exc).__name__}: {str(exc)[:300]}"}
        rows[job.incident_id] = row
        progress(f"[{len(rows)}/{len(jobs)}] {job.incident_id}: {row['category'] or row['error']}")
    return [with_meta(rows[job.incident_id], job.meta) for job in jobs]
