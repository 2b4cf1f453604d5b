"""The prevention checklist names what each incident lacked, for its kind of failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.flow import analyze

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
KERNEL_LOG = "Collect `dmesg -T`"
TELEMETRY = "Sample GPU telemetry"
FLIGHT_RECORDER = "Enable the Flight Recorder"
STACKS = "Dump the stacks of a hung job"


def _checklist(name: str) -> list[str]:
    return analyze(INCIDENTS / name).verdict.checklist


def _has(items: list[str], start: str) -> bool:
    return any(item.startswith(start) for item in items)


def test_thermal_throttle_gets_no_fatal_xid_items_and_asks_for_the_kernel_log():
    items = _checklist("gpu_thermal_straggler")  # nvidia-smi samples, no dmesg
    assert _has(items, KERNEL_LOG)
    assert not _has(items, TELEMETRY)
    assert not any("Xid and ECC monitoring" in item for item in items)


def test_hardware_fault_with_a_kernel_log_asks_for_telemetry_only():
    items = _checklist("hw_xid79_fell_off_bus")  # node-b/kern.log, no nvidia-smi
    assert _has(items, TELEMETRY)
    assert not _has(items, KERNEL_LOG)


@pytest.mark.parametrize(
    ("name", "recorder", "stacks"),
    [
        ("hang_nccl_8rank_one_silent", True, True),  # rank logs only
        ("hang_flight_recorder", False, True),  # a Flight Recorder dump, no stacks
        ("hang_pyspy_bundle_odd_rank", True, False),  # py-spy dumps of every rank
    ],
)
def test_a_hang_asks_for_the_dumps_it_lacked(name, recorder, stacks):
    items = _checklist(name)
    assert _has(items, FLIGHT_RECORDER) is recorder
    assert _has(items, STACKS) is stacks


def test_a_crash_with_everything_it_needs_has_no_gap_items():
    items = _checklist("srun_host_oom_killed")  # the kernel's OOM-kill lines are in the logs
    assert not _has(items, KERNEL_LOG)
    assert not _has(items, FLIGHT_RECORDER)


def test_no_evidence_keeps_the_items_that_would_settle_it(tmp_path):
    (tmp_path / "rank_0.log").write_text("starting training\nloading data\n")
    items = analyze(tmp_path).verdict.checklist
    assert any("full log" in item for item in items)


def test_timestamps_and_per_rank_logs_are_asked_for_when_missing(tmp_path):
    lines = [f"step {i} loss 2.{i:02d}" for i in range(30)] + [
        "Traceback (most recent call last):",
        '  File "train.py", line 10, in <module>',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 GiB is free.",
    ]
    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    items = analyze(tmp_path).verdict.checklist
    assert any(item.startswith("Log a timestamp on every line") for item in items)


def test_a_gloo_job_is_not_told_to_set_nccl_debug_and_missing_ranks_are_asked_for(tmp_path):
    gloo = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:4242"
    (tmp_path / "rank_3.log").write_text(f"epoch 1 step 10 loss 2.3\n{gloo}\n")
    verdict = analyze(tmp_path).verdict
    assert verdict.category == "NETWORK"
    assert not any("NCCL_DEBUG" in item for item in verdict.checklist)
    assert any(item.startswith("Collect the log of every rank") for item in verdict.checklist)  # only rank 3 of 4
    assert not any(item.startswith("Prefix every line with its rank") for item in verdict.checklist)


def test_an_nccl_network_failure_without_nccl_messages_asks_for_them(tmp_path):
    reset = "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5"
    (tmp_path / "console.log").write_text(f"{reset}\n")
    verdict = analyze(tmp_path).verdict
    assert verdict.category == "NETWORK", verdict.category
    assert any("NCCL_DEBUG=WARN" in item for item in verdict.checklist)
