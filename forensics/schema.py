"""Every frame's columns and dtypes, and the vocabulary shared by all passes.

One place declares what a frame looks like so that ingest modules, passes and the
report agree without importing each other. Timestamps are UTC microseconds, ranks
Int32, and every evidence-bearing row keeps its `file` and `line` so any claim in a
report can cite where it came from. The five core frames are declared with `frame()`,
which keeps each column's meaning next to its dtype: docs/frames.md is generated from
FRAME_DOCS, and `--frames` writes SCHEMA_VERSION into every Parquet file.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import polars as pl

TIME = pl.Datetime("us", "UTC")
SCHEMA_VERSION = 1  # of the frames: bump when a column of a core frame changes meaning or dtype


class Category(StrEnum):
    """The root-cause taxonomy of CONTRACT.md (verdict.category)."""

    CUDA_OOM = "CUDA_OOM"
    HOST_OOM = "HOST_OOM"
    COLLECTIVE_TIMEOUT = "COLLECTIVE_TIMEOUT"
    NETWORK = "NETWORK"
    NUMERICAL = "NUMERICAL"
    HARDWARE = "HARDWARE"
    CUDA_ERROR = "CUDA_ERROR"
    DEVICE_MISMATCH = "DEVICE_MISMATCH"
    ENVIRONMENT = "ENVIRONMENT"
    DATA_PIPELINE = "DATA_PIPELINE"
    CHECKPOINT_IO = "CHECKPOINT_IO"
    PROCESS_KILLED = "PROCESS_KILLED"
    STRAGGLER = "STRAGGLER"
    NO_FAILURE = "NO_FAILURE"
    UNKNOWN = "UNKNOWN"


# When two root causes are equally early, the more specific one explains the other:
# a dead GPU explains NCCL errors, a host OOM explains a SIGKILL, anything explains a timeout.
CATEGORY_SPECIFICITY: dict[str, int] = {
    Category.HARDWARE: 12,
    Category.HOST_OOM: 11,
    Category.CUDA_OOM: 10,
    Category.DEVICE_MISMATCH: 9,
    Category.CUDA_ERROR: 8,
    Category.NUMERICAL: 7,
    Category.DATA_PIPELINE: 6,
    Category.CHECKPOINT_IO: 6,
    Category.ENVIRONMENT: 5,
    Category.NETWORK: 4,
    Category.STRAGGLER: 3,
    Category.PROCESS_KILLED: 2,
    Category.COLLECTIVE_TIMEOUT: 1,
    Category.UNKNOWN: 0,
    Category.NO_FAILURE: 0,
}


class Role(StrEnum):
    """What a finding is in the story of an incident.

    initiating: can start an incident by itself (OOM, Xid 79, NaN loss).
    symptom:    a failure whose cause lies elsewhere but is still informative (exit -9).
    cascade:    the crowd reaction to someone else's failure (watchdog timeouts).
    teardown:   the launcher cleaning up (SIGTERM to siblings, ChildFailedError).
    event:      not a failure; context for correlation (checkpoint saved, eval start).
    """

    INITIATING = "initiating"
    SYMPTOM = "symptom"
    CASCADE = "cascade"
    TEARDOWN = "teardown"
    EVENT = "event"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


SEVERITY_ORDER = {"info": 0, "warning": 1, "error": 2, "critical": 3}


class InputKind(StrEnum):
    RANK_LOG = "rank_log"
    CONSOLE_LOG = "console_log"  # one file holding many ranks behind prefixes
    NCCL_LOG = "nccl_log"  # NCCL_DEBUG_FILE output
    TRACE = "trace"  # torch.profiler / Kineto chrome trace
    NVIDIA_SMI_QUERY = "nvidia_smi_q"
    NVIDIA_SMI_XML = "nvidia_smi_q_xml"  # nvidia-smi -q -x
    NVIDIA_SMI_CSV = "nvidia_smi_csv"
    NVIDIA_SMI_DMON = "nvidia_smi_dmon"
    NVIDIA_SMI_TOPO = "nvidia_smi_topo"
    KERNEL_LOG = "kernel_log"  # dmesg, journalctl -k, kern.log, syslog
    LSPCI = "lspci"  # lspci -vv
    DCGMI = "dcgmi"  # dcgmi diag, dcgmi nvlink
    IBSTAT = "ibstat"  # ibstat, ibstatus
    NCCL_TESTS = "nccl_tests"  # all_reduce_perf and the other nccl-tests
    FLIGHT_RECORDER = "flight_recorder"
    ERROR_FILE = "error_file"  # torchelastic error.json
    METADATA = "metadata"  # expected.json, README: ours, not evidence
    UNKNOWN = "unknown"


class InputStatus(StrEnum):
    PARSED = "parsed"
    PARTIAL = "partial"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class FrameDoc:
    """A frame's documented schema: what a row is, and each column's dtype and meaning."""

    name: str
    description: str
    columns: dict[str, tuple[pl.DataType, str]]


FRAME_DOCS: dict[str, FrameDoc] = {}


def frame(
    name: str, description: str, *columns: tuple[str, pl.DataType, str], docs: dict[str, FrameDoc] | None = None
) -> dict[str, pl.DataType]:
    """Declare a frame: record its documentation (in FRAME_DOCS, an incident's frames, unless `docs`
    says where), return its {column: dtype} schema."""
    (FRAME_DOCS if docs is None else docs)[name] = FrameDoc(name, description, {column: (dtype, doc) for column, dtype, doc in columns})
    return {column: dtype for column, dtype, _ in columns}


def empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def conform(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Select and cast `df` to `schema`, adding missing columns as nulls."""
    return df.select([(pl.col(name) if name in df.columns else pl.lit(None)).cast(dtype).alias(name) for name, dtype in schema.items()])


INPUTS = frame(
    "inputs",
    "One row per input file found under the incident folder, with how reading it went.",
    ("path", pl.String, "relative to the incident folder, '/'-separated"),
    ("kind", pl.String, "InputKind: rank_log, console_log, nccl_log, trace, nvidia_smi_q, kernel_log, ..."),
    ("rank", pl.Int32, "the rank its file name names (content may disagree: see findings)"),
    ("host", pl.String, "the host its name or content names"),
    ("bytes", pl.Int64, "size on disk"),
    ("lines", pl.Int64, "text lines read"),
    ("lines_kept", pl.Int64, "text lines kept for analysis: fewer than `lines` when a large file was condensed"),
    ("status", pl.String, "InputStatus: parsed, partial or skipped"),
    ("problem", pl.String, "why partial or skipped; null when parsed"),
    ("cut_mid_line", pl.Boolean, "a text file whose last line has no newline: its writer stopped mid-line"),
)

LINES = frame(
    "lines",
    "One row per physical text line of every text input. A line holding tqdm `\\r` redraws becomes "
    "several rows sharing a line number, so citations still match what an editor shows.",
    ("file", pl.String, "the input's path"),
    ("line", pl.Int64, "1-based physical line number"),
    ("rank", pl.Int32, "global rank, from the line's own prefix first, the file name second"),
    ("local_rank", pl.Int32, "rank on its host, when a launcher prefix says it"),
    ("host", pl.String, "host, from the line's own prefix first, the file second"),
    ("time", TIME, "UTC; null when the line carries no timestamp"),
    ("text", pl.String, "the line with ANSI codes stripped, launcher prefixes kept"),
    ("block", pl.Int64, "first line of the traceback or stack dump this line belongs to"),
)

FINDINGS = frame(
    "findings",
    "One row per piece of evidence, from a catalog pattern or a pass; `pattern` is its catalog id.",
    ("pattern", pl.String, "catalog id: a line pattern (OOM001) or a derived id (HANG001, GPU-XID79)"),
    ("title", pl.String, "what the finding says, in a few words"),
    ("category", pl.String, "Category"),
    ("severity", pl.String, "Severity: info, warning, error, critical"),
    ("role", pl.String, "Role: initiating, symptom, cascade, teardown, event"),
    ("file", pl.String, "the cited input"),
    ("line", pl.Int64, "the cited line"),
    ("rank", pl.Int32, "the rank it is about"),
    ("host", pl.String, "the host it is about"),
    ("time", TIME, "UTC time of the cited line"),
    ("text", pl.String, "the cited line, verbatim (ANSI stripped)"),
    ("gpu", pl.Int32, "GPU index on its host, when known"),
    ("pci_bus_id", pl.String, "normalized 00000000:BB:DD.F, when known"),
    ("gpu_serial", pl.String, "the GPU board's serial number, from an nvidia-smi dump naming that bus id"),
    ("captures", pl.String, "JSON object: the pattern's named captures, or the pass's details"),
)

CITATION = ("file", "line", "rank", "time", "text", "host")


def citing(rows: pl.DataFrame, *, pattern: str, title: pl.Expr, category: str, severity: str, role: str, captures: pl.Expr) -> pl.DataFrame:
    """FINDINGS rows, one per row of `rows`, each citing that row's line (the CITATION columns it has)."""
    cited = [column for column in CITATION if column in rows.columns]
    found = rows.select(
        *cited,
        pattern=pl.lit(pattern),
        title=title,
        category=pl.lit(category),
        severity=pl.lit(severity),
        role=pl.lit(role),
        captures=captures,
    )
    return conform(found, FINDINGS)


METRICS = frame(
    "metrics",
    "Training metrics parsed from log lines: one row per metric line.",
    ("file", pl.String, "the input's path"),
    ("line", pl.Int64, "the metric line"),
    ("rank", pl.Int32, "the rank that logged it"),
    ("time", TIME, "UTC time of the line"),
    ("step", pl.Int64, "training step or iteration"),
    ("epoch", pl.Int64, "the epoch the line names, when it names one"),
    ("loss", pl.Float64, "loss"),
    ("grad_norm", pl.Float64, "gradient norm"),
    ("step_time_s", pl.Float64, "seconds per step (any logged unit, converted)"),
    ("data_time_s", pl.Float64, "seconds waiting for input, when the loop logs it"),
    ("loss_scale", pl.Float64, "mixed-precision loss scale"),
    ("lr", pl.Float64, "learning rate (the first parameter group's where several are logged)"),
    ("tokens_per_s", pl.Float64, "throughput in tokens per second"),
    ("samples_per_s", pl.Float64, "throughput in samples per second"),
    ("tflops", pl.Float64, "achieved TFLOP/s (per GPU where the framework says so)"),
    ("mfu_pct", pl.Float64, "model FLOPs utilization, percent"),
    ("memory_allocated_gib", pl.Float64, "GPU memory allocated, GiB"),
    ("memory_reserved_gib", pl.Float64, "GPU memory reserved by the caching allocator, GiB"),
)

# No job has more ranks than this: a larger rank or world size in a name or a line is not one.
MAX_RANKS = 1 << 17  # 131,072: above the largest jobs run today, small enough to list

RANKS = frame(
    "ranks",
    "One row per rank: what the rank table of the postmortem shows.",
    ("rank", pl.Int32, "global rank"),
    ("host", pl.String, "its host"),
    ("first_time", TIME, "its first timestamped line"),
    ("last_time", TIME, "its last timestamped line"),
    ("last_step", pl.Int64, "the last training step it logged"),
    ("lines", pl.Int64, "lines it logged"),
    ("first_error_file", pl.String, "file of its first initiating or symptom finding"),
    ("first_error_line", pl.Int64, "line of that finding"),
    ("first_error_pattern", pl.String, "catalog id of that finding"),
    ("first_error_text", pl.String, "that line, verbatim"),
    ("status", pl.String, "killed, crashed, stalled, timed_out, exited, silent, finished or running"),
)

FLEET_FRAME_DOCS: dict[str, FrameDoc] = {}  # the tables `forensics batch` writes across incidents
FLEET_FINDINGS = frame(
    "fleet_findings",
    "`forensics batch` only: OUT/findings/<incident id>.parquet, one row per piece of evidence of every incident "
    "(its findings frame, with the incident and what its verdict made of it). Read them all at once: "
    "`pl.scan_parquet('OUT/findings/*.parquet')`, DuckDB `read_parquet('OUT/findings/*.parquet')`.",
    ("incident", pl.String, "the incident's id, as in index.parquet"),
    ("verdict_category", pl.String, "the incident's verdict category"),
    ("leading", pl.Boolean, "cited by the verdict's leading hypothesis"),
    ("template", pl.String, "the cited line with numbers, hex ids, paths and quoted strings masked: the same message across incidents"),
    *[(name, *FRAME_DOCS["findings"].columns[name]) for name in FINDINGS if name != "captures"],
    docs=FLEET_FRAME_DOCS,
)

RANK_ALIVE = ("running", "finished")  # rank statuses with nothing wrong in the rank's own lines
