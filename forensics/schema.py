"""Every frame's columns and dtypes, and the vocabulary shared by all passes.

One place declares what a frame looks like so that ingest modules, passes and the
report agree without importing each other. Timestamps are UTC microseconds, ranks
Int32, and every evidence-bearing row keeps its `file` and `line` so any claim in a
report can cite where it came from.
"""

from __future__ import annotations

from enum import StrEnum

import polars as pl

TIME = pl.Datetime("us", "UTC")


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
    NVIDIA_SMI_CSV = "nvidia_smi_csv"
    NVIDIA_SMI_DMON = "nvidia_smi_dmon"
    NVIDIA_SMI_TOPO = "nvidia_smi_topo"
    KERNEL_LOG = "kernel_log"  # dmesg, journalctl -k, kern.log, syslog
    FLIGHT_RECORDER = "flight_recorder"
    ERROR_FILE = "error_file"  # torchelastic error.json
    METADATA = "metadata"  # expected.json, README: ours, not evidence
    UNKNOWN = "unknown"


class InputStatus(StrEnum):
    PARSED = "parsed"
    PARTIAL = "partial"
    SKIPPED = "skipped"


def empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def conform(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Select and cast `df` to `schema`, adding missing columns as nulls."""
    return df.select(
        [
            (pl.col(name) if name in df.columns else pl.lit(None)).cast(dtype).alias(name)
            for name, dtype in schema.items()
        ]
    )


# One row per input file found under the incident folder.
INPUTS: dict[str, pl.DataType] = {
    "path": pl.String,  # relative to the incident folder, '/'-separated
    "kind": pl.String,  # InputKind
    "rank": pl.Int32,  # from the file name (content may disagree: see findings)
    "host": pl.String,
    "bytes": pl.Int64,
    "lines": pl.Int64,
    "status": pl.String,  # InputStatus
    "problem": pl.String,  # why partial/skipped; null when parsed
    "cut_mid_line": pl.Boolean,  # a text file whose last line has no newline: the writer stopped mid-line
}

# One row per physical text line (a line holding tqdm `\r` redraws becomes several
# rows sharing a line number, so citations still match what an editor shows).
LINES: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,  # 1-based physical line number
    "rank": pl.Int32,  # global rank, from content first, file name second
    "local_rank": pl.Int32,
    "host": pl.String,
    "time": TIME,  # null when the line carries no timestamp
    "text": pl.String,  # ANSI-stripped line, launcher prefixes kept
    "block": pl.Int64,  # first line of the traceback / stack this line belongs to
}

# One row per piece of evidence, from the pattern catalog or any pass.
FINDINGS: dict[str, pl.DataType] = {
    "pattern": pl.String,  # catalog id (OOM001) or pass-made id (GPU-XID79, HANG-LAG)
    "title": pl.String,
    "category": pl.String,  # Category
    "severity": pl.String,  # Severity
    "role": pl.String,  # Role
    "file": pl.String,
    "line": pl.Int64,
    "rank": pl.Int32,
    "host": pl.String,
    "time": TIME,
    "text": pl.String,  # the cited line, verbatim (ANSI stripped)
    "gpu": pl.Int32,  # GPU index on its host, when known
    "pci_bus_id": pl.String,  # normalized 00000000:BB:DD.F, when known
    "captures": pl.String,  # JSON object of named regex captures / pass details
}

# Training metrics parsed from log lines (one row per metric line).
METRICS: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,
    "rank": pl.Int32,
    "time": TIME,
    "step": pl.Int64,
    "loss": pl.Float64,
    "grad_norm": pl.Float64,
    "step_time_s": pl.Float64,
    "data_time_s": pl.Float64,  # time waiting for input, when the loop logs it
    "loss_scale": pl.Float64,
}

# No job has more ranks than this: a larger rank or world size in a name or a line is not one.
MAX_RANKS = 1 << 17  # 131,072: above the largest jobs run today, small enough to list

# Per-rank summary built by the cross-rank pass.
RANKS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "host": pl.String,
    "first_time": TIME,
    "last_time": TIME,
    "last_step": pl.Int64,
    "lines": pl.Int64,
    "first_error_file": pl.String,
    "first_error_line": pl.Int64,
    "first_error_pattern": pl.String,
    "first_error_text": pl.String,
    "status": pl.String,  # killed | crashed | stalled | timed_out | exited | silent | finished | running
}
RANK_ALIVE = ("running", "finished")  # rank statuses with nothing wrong in the rank's own lines
