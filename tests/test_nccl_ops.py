"""Per-call NCCL logs (NCCL_DEBUG_SUBSYS=COLL) name the process behind in its communicator's
operations, or the one calling another collective at the same count."""

from __future__ import annotations

import polars as pl

from forensics.ingest.nccl import parse_nccl
from forensics.passes.nccl_ops import op_count_findings
from tests.conftest import lines_frame

# NVIDIA/nccl#1193: a 128-rank Ray Train job timing out; the excerpt's last calls per process.
RAY_EXCERPT = [
    "(RayTrainWorker pid=615, ip=10.72.7.6) r24-02-22-23-29-0066-raycluster-lv52c-worker-l4-8-fqztx:615:18953 [2] NCCL INFO AllReduce: opCount 139d sendbuff 0x78d056200000 recvbuff 0x78d056200000 count 7382228 datatype 7 op 0 root 0 comm 0x78cfda045840 [nranks=128] stream 0x78d07125e5e0",
    "(RayTrainWorker pid=22754, ip=10.72.12.6) r24-02-22-23-29-0066-raycluster-lv52c-worker-l4-8-srrss:22754:41192 [5] NCCL INFO AllReduce: opCount 139d sendbuff 0x7fb52c200000 recvbuff 0x7fb52c200000 count 7382228 datatype 7 op 0 root 0 comm 0x7fb4b3e6ee80 [nranks=128] stream 0x7fb54524a0f0",
    "(RayTrainWorker pid=619, ip=10.72.2.6) r24-02-22-23-29-0066-raycluster-lv52c-worker-l4-8-hzhzd:619:19049 [3] NCCL INFO AllReduce: opCount 139e sendbuff 0x796eee000000 recvbuff 0x796eee000000 count 7066572 datatype 7 op 0 root 0 comm 0x796f1a16eff0 [nranks=128] stream 0x796fe3e3eb70",
    "(RayTrainWorker pid=22754, ip=10.72.12.6) r24-02-22-23-29-0066-raycluster-lv52c-worker-l4-8-srrss:22754:41192 [5] NCCL INFO AllReduce: opCount 139e sendbuff 0x7fb486000000 recvbuff 0x7fb486000000 count 7066572 datatype 7 op 0 root 0 comm 0x7fb4b3e6ee80 [nranks=128] stream 0x7fb54524a0f0",
]
# ROCm/rccl#429: rank 0's and rank 2's real calls at 28c and 28d (rank 2 in AllGather); ranks 1 and
# 3, which the maintainer says called AllReduce like rank 0, are rank 0's lines under their pids.
RANK0 = [
    "h03r3n06:45006:45006 [0] NCCL INFO AllReduce: opCount 28c sendbuff 0x7f5dd32b2100 recvbuff 0x7f5dd32b2100 count 9984512 datatype 7 op 0 root 0 comm 0x55bef0201370 [nranks=4] stream 0x55bef0208bd0",
    "h03r3n06:45006:45006 [0] NCCL INFO AllReduce: opCount 28d sendbuff 0x7f5dd139b900 recvbuff 0x7f5dd139b900 count 8149504 datatype 7 op 0 root 0 comm 0x55bef0201370 [nranks=4] stream 0x55bef0208bd0",
]
RANK2 = [
    "h03r3n06:45012:45012 [2] NCCL INFO AllGather: opCount 28c sendbuff 0x7f1fd894af00 recvbuff 0x7f1ed1c00100 count 59205120 datatype 0 op 0 root 0 comm 0x559c24b55610 [nranks=4] stream 0x559c248a3630",
    "h03r3n06:45012:45012 [2] NCCL INFO AllGather: opCount 28d sendbuff 0x7f1fce20e500 recvbuff 0x7f2032532100 count 15360 datatype 0 op 0 root 0 comm 0x559c24b55610 [nranks=4] stream 0x559c248a3630",
]


def _findings(text: list[str]) -> pl.DataFrame:
    return op_count_findings(parse_nccl(lines_frame(text, rank=None))["nccl_ops"])


def test_the_process_whose_last_call_is_behind_the_others_is_named():
    found = _findings(RAY_EXCERPT)
    assert found.select("pattern", "line").rows() == [("NCCLOP001", 1)]
    assert "process 615" in found["title"][0] and "0x139d" in found["title"][0]


def test_the_process_calling_another_collective_at_the_same_count_is_named():
    others = [line.replace(":45006:45006 [0]", f":{pid}:{pid} [{dev}]") for pid, dev in ((45008, 1), (45014, 3)) for line in RANK0]
    found = _findings([*RANK0, *RANK2, *others])
    assert found.select("pattern", "line").rows() == [("NCCLOP002", 3)]
    assert "AllGather" in found["title"][0] and "AllReduce" in found["title"][0]
    # Rank 0 and rank 2 alone: one against one names no one.
    assert _findings([*RANK0, *RANK2]).is_empty()


def test_calls_in_step_name_no_one():
    assert _findings(RANK0).is_empty()
    assert _findings(RAY_EXCERPT[:2]).is_empty()
