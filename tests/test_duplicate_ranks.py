"""LAUNCH001: as many join announcements as members, fewer distinct ranks: ranks taken twice."""

from __future__ import annotations

from forensics.passes.duplicate_ranks import ranks_taken_twice
from tests.conftest import lines_frame

# Lightning-AI/pytorch-lightning#4389 (real lines): 2 nodes x 4 GPUs under a plain `srun`.
TWO_NODES_SAME_RANKS = [
    "LOCAL_RANK: 1 - CUDA_VISIBLE_DEVICES: [0,1,2,3]",
    "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8",
    "LOCAL_RANK: 1 - CUDA_VISIBLE_DEVICES: [0,1,2,3]",
    "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8",
    "initializing ddp: GLOBAL_RANK: 2, MEMBER: 3/8",
    "initializing ddp: GLOBAL_RANK: 2, MEMBER: 3/8",
    "initializing ddp: GLOBAL_RANK: 3, MEMBER: 4/8",
    "initializing ddp: GLOBAL_RANK: 3, MEMBER: 4/8",
    "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8",
    "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8",
]
# Lightning 2.x wording, every rank once (a healthy start), and a restart that announces again.
HEALTHY = [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4" for r in range(4)]


def test_ranks_announced_twice_with_others_missing_are_a_launch_error():
    found = ranks_taken_twice(lines_frame(TWO_NODES_SAME_RANKS, rank=None))
    assert found.select("pattern", "category", "role", "line").rows() == [("LAUNCH001", "ENVIRONMENT", "initiating", 4)]
    assert "4 of the 8 ranks were never taken" in found["title"][0]


def test_every_rank_once_or_a_restart_that_announces_them_all_again_is_no_finding():
    assert ranks_taken_twice(lines_frame(HEALTHY, rank=None)).is_empty()
    assert ranks_taken_twice(lines_frame(HEALTHY + HEALTHY, rank=None)).is_empty()
    assert ranks_taken_twice(lines_frame(TWO_NODES_SAME_RANKS[:5], rank=None)).is_empty()  # fewer announcements than members


def test_ranks_past_int64_are_no_ranks_and_raise_nothing():
    huge = [f"initializing ddp: GLOBAL_RANK: {9 * 10**30}, MEMBER: 1/{9 * 10**30}"] * 3
    assert ranks_taken_twice(lines_frame(huge, rank=None)).is_empty()
