"""Untagged tracebacks take the rank of the worker a launcher names next to them."""

from __future__ import annotations

from forensics.flow import analyze

# SimpleTuner#304 (real lines, shortened frames): the worker's traceback, then torchrun's agent.
AGENT_AFTER_TRACEBACK = """\
Traceback (most recent call last):
  File "/root/SimpleTuner/train_sdxl.py", line 1215, in main
    accelerator.backward(loss)
  File "/root/miniconda3/lib/python3.10/site-packages/torch/autograd/__init__.py", line 266, in backward
    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass
RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.
[2024-02-08 10:19:37,299] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 2701 closing signal SIGTERM
[2024-02-08 10:19:38,064] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 1 (pid: 2702) of binary: /root/miniconda3/bin/python
"""

# centermask2#9 (real lines, shortened frames): torch.multiprocessing.spawn names the process first.
SPAWN_BEFORE_TRACEBACK = """\
-- Process 1 terminated with the following error:
Traceback (most recent call last):
  File "/home/alfrid/.virtualenvs/jupyter/lib/python3.6/site-packages/torch/multiprocessing/spawn.py", line 19, in _wrap
    fn(i, *args)
  File "/home/alfrid/.virtualenvs/jupyter/lib/python3.6/site-packages/detectron2/engine/train_loop.py", line 239, in _detect_anomaly
    self.iter, loss_dict
FloatingPointError: Loss became infinite or NaN at iteration=137!
"""


def _verdict(tmp_path, text: str):
    (tmp_path / "console.log").write_text(text)
    return analyze(tmp_path).verdict


def test_the_traceback_just_before_torchrun_reports_a_failed_worker_is_that_worker_s(tmp_path):
    verdict = _verdict(tmp_path, AGENT_AFTER_TRACEBACK)
    assert (verdict.category, verdict.culprit_ranks) == ("NUMERICAL", [1])


def test_the_traceback_after_spawn_names_a_process_is_that_process_s(tmp_path):
    verdict = _verdict(tmp_path, SPAWN_BEFORE_TRACEBACK)
    assert (verdict.category, verdict.culprit_ranks) == ("NUMERICAL", [1])


def test_a_traceback_far_from_the_agent_line_or_on_a_job_of_several_nodes_stays_unattributed(tmp_path):
    far = AGENT_AFTER_TRACEBACK.replace("[2024-02-08 10:19:37,299]", "\n".join(["step 7 done"] * 20) + "\n[2024-02-08 10:19:37,299]")
    assert _verdict(tmp_path, far).culprit_ranks == []
    two_nodes = "\n".join(f"{host}:4211:4211 [0] NCCL INFO Bootstrap : Using eth0" for host in ("node1", "node2") for _ in range(3))
    assert _verdict(tmp_path, two_nodes + "\n" + SPAWN_BEFORE_TRACEBACK).culprit_ranks == []


def test_process_0_of_a_job_that_shows_no_other_process_is_not_singled_out(tmp_path):
    """centermask2#9's lines with process index 0, as in RVC#130's one-process job: no culprit among one."""
    text = SPAWN_BEFORE_TRACEBACK.replace("-- Process 1 terminated", "-- Process 0 terminated")
    assert _verdict(tmp_path, text).culprit_ranks == []
    # With torchrun closing another worker, process 0 is one of several: it is named.
    other = (
        "[2024-02-08 10:19:37,299] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 2701 closing signal SIGTERM\n"
    )
    assert _verdict(tmp_path, text + other).culprit_ranks == [0]
