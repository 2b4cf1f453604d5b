"""The prevention checklist: what to have in place before the next incident, from what this one lacked.

Enters: the verdict (category, state, leading hypothesis, generic checklist), the incident (its
inputs, lines, metrics, findings), the world size and the catalog's patterns. Leaves checkbox items.

Each item names a gap seen here, for a failure of this kind: no kernel log where a kill or a
hardware fault is only recorded there, no GPU telemetry for a hardware fault or a slow rank,
no Flight Recorder dump or stacks for a hang, no NCCL messages for a network failure of an
NCCL job, no rank on most lines, no log from some ranks, no timestamps, no per-step metrics
for a numerical failure or a slowdown. The verdict's generic items (its category playbook's)
follow only when the leading hypothesis' patterns give no prevention advice of their own (a
thermal throttle is a hardware fault, but the fatal-Xid items do not fit it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from forensics.catalog.load import Derived, Pattern
from forensics.incident import Incident
from forensics.schema import Category, InputKind
from forensics.verdict import Verdict

GPU_TELEMETRY = {
    InputKind.NVIDIA_SMI_QUERY, InputKind.NVIDIA_SMI_XML, InputKind.NVIDIA_SMI_CSV, InputKind.NVIDIA_SMI_DMON, InputKind.DCGMI,
}  # fmt: skip
# Kernel messages pasted into a console or a rank log count as a kernel log.
KERNEL_LINE = r"NVRM: Xid|Out of memory: Kill|oom-kill|oom_reaper|invoked oom-killer|kernel: |\bAER: |pcieport "
NCCL_LINE = r"NCCL (?:INFO|WARN)"
GLOO = r"(?i)\bgloo\b"
STACK_PATTERN = r"^STACK\d"
MIN_LINES_FOR_TIMESTAMPS = 20  # a short excerpt without timestamps says nothing about the logging setup


@dataclass(frozen=True)
class Gap:
    """Something this incident lacked that its kind of failure needs; `item` says what to set up."""

    applies: Callable[[Verdict], bool]
    missing: Callable[[Incident, int | None], bool]
    item: str


def _kinds(incident: Incident) -> set[str]:
    return set(incident.inputs["kind"].to_list()) if not incident.inputs.is_empty() else set()


def _any_line(incident: Incident, pattern: str) -> bool:
    return not incident.lines.is_empty() and bool(incident.lines["text"].str.contains(pattern).any())


def _categories(*categories: str) -> Callable[[Verdict], bool]:
    return lambda verdict: verdict.category in categories


def _no_kernel_log(incident: Incident, _: int | None) -> bool:
    return InputKind.KERNEL_LOG not in _kinds(incident) and not _any_line(incident, KERNEL_LINE)


def _no_gpu_telemetry(incident: Incident, _: int | None) -> bool:
    return not (_kinds(incident) & {str(k) for k in GPU_TELEMETRY})


def _no_flight_recorder(incident: Incident, _: int | None) -> bool:
    return InputKind.FLIGHT_RECORDER not in _kinds(incident)


def _no_stacks(incident: Incident, _: int | None) -> bool:
    return incident.findings.is_empty() or not bool(incident.findings["pattern"].str.contains(STACK_PATTERN).any())


def _no_nccl_messages(incident: Incident, _: int | None) -> bool:
    """An NCCL job (not gloo's) whose logs hold no NCCL message."""
    return not _any_line(incident, NCCL_LINE) and not _any_line(incident, GLOO)


def _lines_without_ranks(incident: Incident, world: int | None) -> bool:
    """A job of several ranks where most lines say no rank."""
    lines = incident.lines
    return (world or 0) > 1 and not lines.is_empty() and lines["rank"].null_count() > lines.height / 2


def _ranks_without_logs(incident: Incident, world: int | None) -> bool:
    """A job of several ranks, some of which left no line here."""
    named = incident.lines["rank"].drop_nulls().n_unique() if not incident.lines.is_empty() else 0
    return (world or 0) > 1 and named < (world or 0)


def _no_timestamps(incident: Incident, _: int | None) -> bool:
    lines = incident.lines
    return lines.height >= MIN_LINES_FOR_TIMESTAMPS and lines["time"].null_count() == lines.height


def _no_step_metrics(incident: Incident, _: int | None) -> bool:
    return incident.metrics.is_empty()


def _failed(verdict: Verdict) -> bool:
    return verdict.category not in (Category.NO_FAILURE, Category.UNKNOWN) or verdict.state != "unknown"


GAPS = (
    Gap(
        _categories(Category.HARDWARE, Category.HOST_OOM, Category.PROCESS_KILLED, Category.CUDA_ERROR),
        _no_kernel_log,
        "Collect `dmesg -T` (or `journalctl -k`) of every host with the job's logs: OOM kills, Xids and PCIe errors"
        " are recorded only there, and none was among these inputs",
    ),
    Gap(
        _categories(Category.HARDWARE, Category.STRAGGLER, Category.CUDA_ERROR),
        _no_gpu_telemetry,
        "Sample GPU telemetry during jobs (`nvidia-smi --query-gpu=... --format=csv -l 10`, `nvidia-smi dmon` or DCGM)"
        " so clocks, temperatures, ECC and Xids can be timed against the failure: none was among these inputs",
    ),
    Gap(
        lambda v: v.state == "hung" or v.category == Category.COLLECTIVE_TIMEOUT,
        _no_flight_recorder,
        "Enable the Flight Recorder (`TORCH_NCCL_TRACE_BUFFER_SIZE=2000`, `TORCH_NCCL_DUMP_ON_TIMEOUT=1`) so a"
        " timeout leaves each rank's last collectives: this incident has no dump",
    ),
    Gap(
        lambda v: v.state == "hung",
        _no_stacks,
        "Dump the stacks of a hung job before killing it (`py-spy dump --pid`, or `faulthandler.dump_traceback_later`"
        " in the training script): no stack of a waiting rank was among these inputs",
    ),
    Gap(
        _categories(Category.NETWORK, Category.COLLECTIVE_TIMEOUT),
        _no_nccl_messages,
        "Run with `NCCL_DEBUG=WARN` (INFO with `NCCL_DEBUG_SUBSYS=INIT,NET` when reproducing) so transport errors"
        " name their peer: these logs hold no NCCL message",
    ),
    Gap(
        _failed,
        _lines_without_ranks,
        "Prefix every line with its rank (`torchrun --tee 3` does, or a rank field in the log format): most of"
        " these lines do not say which rank wrote them",
    ),
    Gap(
        _failed,
        _ranks_without_logs,
        "Collect the log of every rank (`torchrun --log-dir DIR`, one file per rank): a rank with no log here"
        " cannot be told apart from one that was fine",
    ),
    Gap(
        _failed,
        _no_timestamps,
        "Log a timestamp on every line (`logging` with `%(asctime)s`): without one, events on different ranks"
        " and hosts cannot be put in order, and none of these lines has one",
    ),
    Gap(
        lambda v: v.category in (Category.NUMERICAL, Category.STRAGGLER) or v.state in ("slow", "diverged"),
        _no_step_metrics,
        "Log loss, gradient norm, loss scale and step time every few steps: these logs show no training metric"
        " to locate the first bad step",
    ),
)


def _own_prevention(verdict: Verdict, patterns: dict[str, Pattern | Derived]) -> bool:
    """Whether the leading hypothesis' own patterns say how to prevent this failure."""
    if not verdict.hypotheses:
        return False
    cited = {e["pattern"] for e in verdict.hypotheses[0].evidence}
    return any(patterns[pid].structural for pid in cited if pid in patterns)


def prevention_checklist(verdict: Verdict, incident: Incident, world: int | None, patterns: dict[str, Pattern | Derived]) -> list[str]:
    """The gaps this incident showed, then the verdict's generic items (its category's, or what
    settles a verdict without evidence) unless the leading patterns advised on prevention."""
    items = [gap.item for gap in GAPS if gap.applies(verdict) and gap.missing(incident, world)]
    if not _own_prevention(verdict, patterns):
        items += [item for item in verdict.checklist if item not in items]
    return items
