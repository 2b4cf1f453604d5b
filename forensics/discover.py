"""Walk an incident folder and classify every file: what it is, which rank and host.

Every regular file outside `.git` folders ends up in the INPUTS table. Kind is decided
by content first (a sniff of the decompressed head), then by name; a rank comes from
the file name here and may be overruled by line prefixes during ingest. Symbolic links are never followed
(a link could point anywhere on the machine): they are listed as skipped.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import polars as pl

from forensics.ingest.dcgm import sniff_dcgm
from forensics.ingest.fabric import sniff_fabric
from forensics.ingest.flight_recorder import sniff_flight_recorder
from forensics.ingest.gpu_sniff import sniff_gpu_kind
from forensics.ingest.pcie import sniff_pcie
from forensics.ingest.text import compression_of, looks_binary, read_head
from forensics.schema import INPUTS, MAX_RANKS, InputKind, InputStatus

# The project's own fixture metadata: skipped only inside the project's fixtures folder, where
# it sits next to the evidence; anywhere else a `README.md` may well be someone's pasted log.
METADATA_NAMES = {"expected.json", "SOURCE.md", "README.md", "NOTES.md"}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst")

# Rank in a file name: rank_3.log, rank3.log, train_rank3.log, worker-3.log, rank-0.json.gz,
# node2_rank12.err, log_rank_07.out. Checked in order; the first that matches wins.
NAME_RANK = [
    re.compile(r"(?:^|[^a-z])rank[_\-. ]?(\d+)(?![\d])", re.I),
    re.compile(r"(?:^|[^a-z])worker[_\-. ]?(\d+)(?![\d])", re.I),
    re.compile(r"(?:^|[^a-z])proc(?:ess)?[_\-. ]?(\d+)(?![\d])", re.I),
]
TORCHRUN_TREE = re.compile(r"(?:^|/)attempt_\d+/(\d+)/(?:stdout|stderr)\.log$")
NCCL_DEBUG_NAME = re.compile(r"nccl", re.I)
KERNEL_LOG_NAME = re.compile(r"(?:^|[/_.\-])(?:dmesg|kern|kernel|syslog|messages|journal)", re.I)

NCCL_LINE = re.compile(rb"\S+:\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL (?:INFO|WARN)")


def rank_from_name(path: str) -> tuple[int | None, int | None]:
    """(global rank, local rank) suggested by a path; torchrun trees give a local rank."""
    tree = TORCHRUN_TREE.search(path)
    if tree:
        local = int(tree.group(1))
        return None, local if local < MAX_RANKS else None
    name = path.rsplit("/", 1)[-1]
    for pattern in NAME_RANK:
        match = pattern.search(name)
        if match:
            rank = int(match.group(1))
            return (rank, None) if rank < MAX_RANKS else (None, None)
    return None, None


def sniff_kind(path: str, head: bytes, fixture: bool = False) -> tuple[str, str | None]:
    """(InputKind, reason to skip or None) from the name and the decompressed head.

    Formats with a reader of their own are recognized by that reader's sniffer (GPU
    dumps and kernel logs: ingest.gpu_sniff; Flight Recorder dumps: ingest.flight_recorder;
    nccl-tests, ibstat and ibstatus: ingest.fabric; dcgmi: ingest.dcgm; lspci: ingest.pcie),
    so a format's rules live in one place. `fixture`: the incident is one of the project's
    fixtures, whose metadata files are not evidence.
    """
    name = path.rsplit("/", 1)[-1]
    lower = name.lower()
    if fixture and name in METADATA_NAMES:
        return InputKind.METADATA, "fixture metadata, not evidence"
    if not head:
        return InputKind.UNKNOWN, "empty or unreadable"
    stripped = head.lstrip()
    if stripped.startswith(b"{") or lower.endswith(TRACE_SUFFIXES):
        if b'"traceEvents"' in head or b'"schemaVersion"' in head:
            return InputKind.TRACE, None
        if b'"message"' in head and (b'"extraInfo"' in head or b'"timestamp"' in head):
            return InputKind.ERROR_FILE, None
    if sniff_flight_recorder(path, head):
        return InputKind.FLIGHT_RECORDER, None
    if looks_binary(head):
        return InputKind.UNKNOWN, "binary content"
    text = head.decode("utf-8", errors="replace")
    gpu_kind = sniff_gpu_kind(text)
    if gpu_kind is not None:
        return InputKind(gpu_kind), None
    fabric_kind = sniff_fabric(text)
    if fabric_kind is not None:
        return fabric_kind, None
    if sniff_dcgm(text):
        return InputKind.DCGMI, None
    if sniff_pcie(text):
        return InputKind.LSPCI, None
    if KERNEL_LOG_NAME.search(lower):
        return InputKind.KERNEL_LOG, None
    if NCCL_DEBUG_NAME.search(lower) and len(NCCL_LINE.findall(head)) * 2 >= head.count(b"\n"):
        return InputKind.NCCL_LOG, None
    if stripped.startswith((b"{", b"[")) and lower.endswith((".json", ".json.gz")):
        return InputKind.UNKNOWN, "JSON that is neither a trace, a Flight Recorder dump nor an error file"
    return InputKind.RANK_LOG, None


def _entry(root: Path, entry: os.DirEntry) -> tuple[str, Path | None, str | None, bool]:
    """(relative path, absolute path or None, problem, is a directory to descend into)."""
    full = Path(entry.path)
    rel = full.relative_to(root).as_posix()
    try:
        if entry.is_symlink():
            what = "symbolic link to a directory" if entry.is_dir() else "symbolic link"
            return rel, None, f"{what} (not followed)", False
        if entry.is_dir(follow_symlinks=False):
            return rel, None, None, True
        if entry.is_file(follow_symlinks=False):
            return rel, full, None, False
    except OSError as exc:
        return rel, None, f"unreadable: {exc.strerror or exc}", False
    return rel, None, "not a regular file", False


def _walk(root: Path) -> list[tuple[str, Path | None, str | None]]:
    """(relative path, absolute path or None, problem) for every entry below root, by path.

    An explicit stack, not os.walk: os.walk recurses (Python 3.11) and a hostile tree a
    thousand folders deep would end the run with RecursionError.
    """
    entries = []
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as listing:
                children = list(listing)
        except OSError as exc:
            rel = directory.relative_to(root).as_posix()
            entries.append((rel, None, f"unreadable folder: {exc.strerror or exc}"))
            continue
        for child in children:
            rel, full, problem, descend = _entry(root, child)
            if not _encodable(rel):
                entries.append((_escaped(rel), None, "name is not valid UTF-8: not read"))
            elif descend and child.name == ".git":
                entries.append((rel + "/", None, "version-control folder: not read"))
            elif descend:
                pending.append(Path(child.path))
            else:
                entries.append((rel, full, problem))
    return sorted(entries, key=lambda e: e[0])


def _single(root: Path, name: str) -> tuple[str, Path | None, str | None]:
    """The one entry of a single-file incident, checked like any walked file."""
    try:
        with os.scandir(root) as listing:
            for child in listing:
                if child.name == name:
                    rel, full, problem, _descend = _entry(root, child)
                    return rel, full, problem
    except OSError as exc:
        return name, None, f"unreadable folder: {exc.strerror or exc}"
    return name, None, "not found"


def _encodable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # bytes the OS handed over undecoded (surrogate escapes)
        return False
    return True


def _escaped(name: str) -> str:
    """A path whose undecodable bytes are shown as \\xNN, fit for tables and reports."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def discover(root: Path, only: str | None = None) -> pl.DataFrame:
    """The INPUTS table for `root`: one row per file, status pending ingest (null) or skipped.

    `only`: the name of one file directly in `root`, the whole incident (a single Slurm
    `.out`); nothing else in `root` is looked at.
    """
    rows = []
    fixture = Path(root).resolve().is_relative_to(FIXTURES)
    entries = [_single(Path(root), only)] if only is not None else _walk(root)
    for rel, full, problem in entries:
        rank, _local = rank_from_name(rel)
        size = None
        kind: str = InputKind.UNKNOWN
        if full is not None:
            try:
                size = full.stat().st_size
                head = read_head(full)
            except OSError as exc:
                head, problem = b"", f"unreadable: {exc.strerror or exc}"
            if problem is None:
                kind, problem = sniff_kind(rel, head, fixture)
                if kind == InputKind.RANK_LOG and rank is None and _local is None:
                    kind = InputKind.CONSOLE_LOG
                if problem is None and compression_of(head[:4]) is None and size == 0:
                    problem = "empty file"
        rows.append(
            {
                "path": rel,
                "kind": str(kind),
                "rank": rank,
                "host": None,
                "bytes": size,
                "lines": None,
                "status": InputStatus.SKIPPED.value if problem else None,
                "problem": problem,
                "cut_mid_line": None,
            }
        )
    return pl.DataFrame(rows, schema=INPUTS) if rows else pl.DataFrame(schema=INPUTS)
