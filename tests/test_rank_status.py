"""A rank's status says what its own lines show: finished, running, silent, crashed — never "healthy"."""

from __future__ import annotations

import polars as pl

from forensics.flow import analyze
from forensics.ingest.metrics import extract_metrics
from forensics.passes.cross_rank import rank_table
from tests.conftest import findings_frame, lines_frame


def _nanogpt_steps(first: int, last: int) -> list[str]:
    """nanoGPT's per-iteration line (karpathy/nanoGPT#110 format), every 10 iterations."""
    return [f"iter {i}: loss 3.9185, time 562.66ms" for i in range(first, last + 1, 10)]


def _frames(steps_by_rank: dict[int, list[str]]) -> pl.DataFrame:
    return pl.concat([lines_frame(texts, file=f"rank_{r}.log", rank=r) for r, texts in steps_by_rank.items()])


def test_a_rank_that_stopped_stepping_while_others_went_on_is_silent():
    lines = _frames({0: _nanogpt_steps(0, 200), 1: _nanogpt_steps(0, 200), 2: _nanogpt_steps(0, 120)})
    ranks = rank_table(lines, findings_frame([]), extract_metrics(lines), 3)
    assert ranks.select("rank", "status", "last_step").rows() == [(0, "running", 200), (1, "running", 200), (2, "silent", 120)]


def test_one_logging_interval_behind_is_ordinary_skew_not_silence():
    lines = _frames({0: _nanogpt_steps(0, 200), 1: _nanogpt_steps(0, 190)})
    ranks = rank_table(lines, findings_frame([]), extract_metrics(lines), 2)
    assert ranks["status"].to_list() == ["running", "running"]


def test_a_rank_below_the_world_size_with_no_line_is_silent_and_a_crashed_rank_says_so():
    lines = _frames({0: _nanogpt_steps(0, 50), 1: _nanogpt_steps(0, 50)})
    oom = findings_frame(
        [
            {
                "file": "rank_1.log",
                "line": 3,
                "rank": 1,
                "category": "CUDA_OOM",
                "pattern": "OOM001",
                "role": "initiating",
                "severity": "critical",
                "text": "x",
            }
        ]
    )
    ranks = rank_table(lines, oom, extract_metrics(lines), 3)
    assert ranks["status"].to_list() == ["running", "crashed", "silent"]


def test_a_completion_line_finishes_the_ranks_and_a_torn_down_job_leaves_them_running(incident):
    done = incident(
        {
            "rank_0.log": "\n".join(_nanogpt_steps(0, 50)) + "\n[rank0]: Training completed. Total training time: 0:41:02\n",
            "rank_1.log": "\n".join(_nanogpt_steps(0, 50)) + "\n",
        }
    )
    statuses = analyze(done).incident.ranks["status"].to_list()
    assert statuses == ["finished", "finished"] or statuses == ["finished", "running"]
    torn = incident(
        {
            "rank_0.log": "\n".join(_nanogpt_steps(0, 50)) + "\n",
            "rank_1.log": "\n".join(_nanogpt_steps(0, 50))
            + "\n[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.10 GiB of which 1.06 GiB is free.\n",
        }
    )
    ranks = analyze(torn).incident.ranks
    assert ranks["status"].to_list() == ["running", "crashed"]
    assert "healthy" not in ranks["status"].to_list()


# hiyouga/LlamaFactory#2470 (DeepSpeed --hostfile, pdsh `gpu003: ` prefixes) and the pdsh line of
# NVIDIA/nccl#1029 (reference/formats.md 0), in one console as a multi-node launcher interleaves them.
MIXED_CONSOLE = [
    "gpu003: [2024-02-11 22:36:22,106] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 275125",
    "gpu003: Traceback (most recent call last):",
    'gpu003:   File "/data/vayu/train/LLaMA-Factory/src/train_bash.py", line 14, in <module>',
    "rdma-gpu-train-worker-0: rdma-gpu-train-worker-0:19488:21063 [4] NCCL INFO Using network IBext",
    "gpu003:     main()",
    'gpu003:   File "/data/vayu/train/LLaMA-Factory/src/train_bash.py", line 5, in main',
]


def test_each_line_of_a_mixed_console_takes_its_own_host_and_a_prefixed_traceback_stays_one_block(incident):
    lines = analyze(incident({"console.log": "\n".join(MIXED_CONSOLE) + "\n"})).incident.lines
    assert lines["host"].to_list() == ["gpu003"] * 3 + ["rdma-gpu-train-worker-0"] + ["gpu003"] * 2
    gpu003 = lines.filter(pl.col("host") == "gpu003")
    assert gpu003.filter(pl.col("line") >= 2)["block"].unique().to_list() == [2]


def test_a_rank_on_a_throttled_gpu_ran_on_and_the_triage_says_slow_not_failed():
    from pathlib import Path

    analysis = analyze(Path(__file__).resolve().parents[1] / "fixtures" / "incidents" / "gpu_thermal_straggler")
    status = dict(analysis.incident.ranks.select("rank", "status").iter_rows())
    assert status[2] == "finished"  # throttled (hardware at error level), not dead
    triage = analysis.verdict.triage
    assert any(note.startswith("First seen slow") for note in triage)
    assert "No rank failed; 1 of 4 was slow (rank 2) and held the others back." in triage
    assert not any(note.startswith("Failed ") or "failed first-hand" in note for note in triage)
