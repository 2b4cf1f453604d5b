"""Host memory a trainer reports climbing steeply is a HOST_OOM warning; steady memory is not."""

from __future__ import annotations

import json

from forensics.passes.host_memory import host_memory_climb, large_allocation_then_stopped
from tests.conftest import lines_frame

# WeNet#989 (real lines): rank 0's RSS from 5 to 212 GB in 90 seconds, still stepping.
WENET = [
    "2022-03-23 23:57:43,632 DEBUG TRAIN Batch 0/185200 loss 5.362794 loss_att 4.925412 loss_ctc 6.383353 lr 0.00065721 rank 0 RSS MEM USE: 5.11G",
    "2022-03-23 23:58:12,914 DEBUG TRAIN Batch 0/185400 loss 9.745964 loss_att 7.788527 loss_ctc 14.313314 lr 0.00065687 rank 0 RSS MEM USE: 46.51G",
    "2022-03-23 23:58:27,353 DEBUG TRAIN Batch 0/185500 loss 7.055099 loss_att 5.558590 loss_ctc 10.546951 lr 0.00065670 rank 0 RSS MEM USE: 105.61G",
    "2022-03-23 23:58:56,216 DEBUG TRAIN Batch 0/185700 loss 4.324765 loss_att 3.620107 loss_ctc 5.968966 lr 0.00065633 rank 0 RSS MEM USE: 212.04G",
]
# DeepSpeed#2302 (real lines): the memory report of a healthy run, flat at 4.05 GB.
STEADY = [
    "[2023-01-15 19:09:56,487] [INFO] [utils.py:836:see_memory_usage] CPU Virtual Memory:  used = 4.05 GB, percent = 31.9%",
] * 5


def test_memory_that_multiplies_while_the_run_steps_is_a_host_oom_warning_citing_the_last_reading():
    found = host_memory_climb(lines_frame(WENET))
    row = found.row(0, named=True)
    assert (row["pattern"], row["category"], row["severity"], row["line"]) == ("MEM001", "HOST_OOM", "warning", 4)
    assert json.loads(row["captures"]) == {"first_gib": 5.11, "last_gib": 212.04, "readings": 4}


def test_steady_small_or_too_few_readings_are_no_finding():
    assert host_memory_climb(lines_frame(STEADY)).is_empty()
    small = [line.replace("212.04G", "15.0G").replace("105.61G", "12.0G").replace("46.51G", "9.0G") for line in WENET]
    assert host_memory_climb(lines_frame(small)).is_empty()  # tripled, but ends below 16 GB
    assert host_memory_climb(lines_frame(WENET[:2])).is_empty()


# webcompat/autowebcompat#280 and ashawkey/torch-ngp#113 (real lines, stacks shortened): Colab
# prints `^C` when it kills a cell that ran the VM out of RAM.
ALLOC_THEN_STOPPED = [
    "Using TensorFlow backend.",
    "tcmalloc: large alloc 6457049088 bytes == 0x4e70000 @  0x7f0ddb5c3001 0x7f0dd8bf8b85 0x7f0dd8c5bb43",
    "tcmalloc: large alloc 6457049088 bytes == 0x185ca6000 @  0x7f0ddb5c11e7 0x7f0dd8bf8a41 0x7f0dd8c5e7c0",
    "^C",
]
NGP = [
    "`Loading train data: 100% 96/96 [00:17<00:00,  5.45it/s]",
    "tcmalloc: large alloc 11498029056 bytes == 0x7f52590bc000 @  0x7f568599a1e7 0x7f56152510ce",
    "^C`",
]


def test_a_huge_allocation_just_before_the_process_was_stopped_is_a_host_oom():
    for texts, line, gib in ((ALLOC_THEN_STOPPED, 2, 6.01), (NGP, 2, 10.71)):
        found = large_allocation_then_stopped(lines_frame(texts))
        assert found.select("pattern", "category", "role", "line").rows() == [("MEM002", "HOST_OOM", "initiating", line)]
        assert f'"alloc_gib":{gib}' in found["captures"][0]


def test_a_large_allocation_in_a_run_that_went_on_or_a_small_one_is_no_finding():
    went_on = ALLOC_THEN_STOPPED[:3] + [f"Epoch 1/10 - step {i} - loss: 0.{i}" for i in range(30)] + ["^C"]
    assert large_allocation_then_stopped(lines_frame(went_on)).is_empty()
    small = [ALLOC_THEN_STOPPED[1].replace("6457049088", "1073741824"), "^C"]
    assert large_allocation_then_stopped(lines_frame(small)).is_empty()
