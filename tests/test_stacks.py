"""Stack dumps of live processes (py-spy, faulthandler, gdb) say what each thread was waiting in."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from forensics.flow import analyze
from forensics.passes.stacks import stack_waits, what_the_stalled_rank_did
from forensics.passes.traceback_context import uncaught_exceptions
from forensics.schema import FINDINGS
from tests.conftest import findings_frame, lines_frame

PY_SPY_DATALOADER = [  # ray-project/ray#52598: a Ray Train worker stuck on its DataLoader (py-spy dump)
    'Thread 120110 (idle): "Thread-1"',
    "    push_local_metrics (ray/train/v2/_internal/callbacks/metrics.py:223)",
    "    run (threading.py:917)",
    'Thread 120142 (idle): "TrainingThread(train_fn_per_worker)"',
    "    select (selectors.py:416)",
    "    get (multiprocessing/queues.py:113)",
    "    _try_get_data (torch/utils/data/dataloader.py:1133)",
    "    _get_data (torch/utils/data/dataloader.py:1278)",
    "    train_fn_per_worker (train_benchmark.py:340)",
]
PY_SPY_ASYNC_SAVE = [  # NVIDIA/Megatron-LM#2422: the main thread joins the async checkpoint writer
    'Thread 36380 (idle): "MainThread"',
    "    poll (multiprocessing/popen_fork.py:27)",
    "    join (multiprocessing/process.py:149)",
    "    close (core/dist_checkpointing/strategies/async_utils.py:248)",
    "    save (core/dist_checkpointing/serialization.py:396)",
    'Thread 38606 (idle): "Thread-2 (_pin_memory_loop)"',
    "    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:52)",
]
PY_SPY_FAIRSEQ = [  # facebookresearch/fairseq#4816: older py-spy (hex thread id), rank 0 waits on its data iterator
    'Thread 0x7FA6E7C01740 (idle): "MainThread"',
    "    wait (threading.py:302)",
    "    get (queue.py:170)",
    "    __next__ (fairseq/data/iterators.py:648)",
    "    __iter__ (fairseq/data/iterators.py:59)",
    "    _chunk_iterator (fairseq/data/iterators.py:528)",
    "    train (fairseq_cli/train.py:274)",
]
# fixtures/incidents/rank_data_hang_faulthandler: faulthandler on torchrun's SIGTERM, through --tee.
FAULTHANDLER_TEE = [
    "[default2]:Current thread 0x00007f7b2bbc3b80 (most recent call first):",
    '[default2]:  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py", line 113 in get',
    '[default2]:  File "/work/torchenv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1291 in _try_get_data',
    '[default2]:  File "/work/main/fixtures/generate/train.py", line 137 in train',
]


def test_py_spy_dataloader_wait_is_data_pipeline_citing_the_frame():
    found = stack_waits(lines_frame(PY_SPY_DATALOADER, rank=None))
    assert found.select("pattern", "category", "line").rows() == [("STACK001", "DATA_PIPELINE", 7)]


def test_checkpoint_code_wins_and_the_idle_pin_memory_thread_says_nothing():
    found = stack_waits(lines_frame(PY_SPY_ASYNC_SAVE, rank=None))
    assert found.select("pattern", "category", "line").rows() == [("STACK002", "CHECKPOINT_IO", 4)]


def test_a_faulthandler_dump_behind_a_launcher_prefix_is_one_block_and_no_traceback(incident):
    analysis = analyze(incident({"console.log": "\n".join(FAULTHANDLER_TEE) + "\n"}))
    lines = analysis.incident.lines
    assert lines["block"].unique().to_list() == [1]  # `[default2]:` takes no space of the payload's indent
    assert lines["rank"].unique().to_list() == [2]
    patterns = analysis.incident.findings["pattern"].to_list()
    assert "STACK001" in patterns and not {"CTX002", "EXC002"} & set(patterns)
    assert uncaught_exceptions(lines, pl.DataFrame(schema=FINDINGS)).is_empty()


def test_the_rank_a_hang_blames_takes_the_category_of_its_own_dump():
    findings = findings_frame(
        [
            {
                "pattern": "HANG002",
                "category": "COLLECTIVE_TIMEOUT",
                "role": "initiating",
                "rank": 2,
                "file": "console.log",
                "line": 139,
                "title": "Rank missing from the collective-timeout crowd",
                "severity": "error",
            },
            {
                "pattern": "STACK001",
                "category": "DATA_PIPELINE",
                "role": "initiating",
                "rank": 2,
                "file": "console.log",
                "line": 132,
                "title": "Stack dump: the training thread was waiting for a DataLoader batch",
                "severity": "error",
            },
            {
                "pattern": "HANG002",
                "category": "COLLECTIVE_TIMEOUT",
                "role": "initiating",
                "rank": 5,
                "file": "console.log",
                "line": 140,
                "title": "Rank missing from the collective-timeout crowd",
                "severity": "error",
            },
        ]
    )
    explained = what_the_stalled_rank_did(findings).sort("line")
    assert explained["category"].to_list() == ["DATA_PIPELINE", "DATA_PIPELINE", "COLLECTIVE_TIMEOUT"]
    assert "its own stack dump (console.log:132) shows why" in explained["title"][1]


NCCL_1504 = [  # NVIDIA/nccl#1504: a kernel's assertion lines (untagged), then rank 1's traceback
    '../aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: [0,0,0], thread: [30,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.',
    '../aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: [0,0,0], thread: [31,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.',
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/root/miniconda3/envs/pippy/lib/python3.10/site-packages/torch/distributed/pipelining/stage.py", line 580, in forward_one_chunk',
]


def test_untagged_cuda_assert_lines_belong_to_the_rank_whose_traceback_follows(incident):
    verdict = analyze(incident({"console.log": "\n".join(NCCL_1504) + "\n"})).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("CUDA_ERROR", [1])
    # Not when another rank's line comes first: then nothing says whose kernel it was.
    other = NCCL_1504[:2] + ["[rank0]: step 12 | loss 2.31"] + NCCL_1504[2:]
    assert analyze(incident({"console.log": "\n".join(other) + "\n"})).verdict.culprit_ranks == []


def _dump(rank: int, frames: list[str]) -> list[str]:
    """One rank's faulthandler dump as torchrun --tee prints it (fixtures/incidents/hang_stopped_stacks_odd_rank)."""
    return [f"[default{rank}]:Current thread 0x00007f96aa33cb80 (most recent call first):"] + [f"[default{rank}]:  {f}" for f in frames]


IN_ALL_REDUCE = [
    'File "/work/torchenv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce',
    'File "/work/main/fixtures/generate/train.py", line 166 in train',
]
IN_TRAIN = [
    'File "/work/main/fixtures/generate/train.py", line 158 in train',
    'File "/work/main/fixtures/generate/train.py", line 218 in main',
]


def test_the_one_rank_not_waiting_in_a_collective_is_the_odd_one_out(incident):
    text = _dump(0, IN_ALL_REDUCE) + _dump(1, IN_ALL_REDUCE) + _dump(3, IN_TRAIN) + _dump(2, IN_ALL_REDUCE)
    verdict = analyze(incident({"console.log": "\n".join(text) + "\n"})).verdict
    assert (verdict.category, verdict.culprit_ranks, verdict.state) == ("COLLECTIVE_TIMEOUT", [3], "hung")
    assert "line 158 in train" in verdict.first_failure["text"]
    # Two ranks off the collective: nothing says which one the others wait for.
    two_odd = _dump(0, IN_ALL_REDUCE) + _dump(1, IN_ALL_REDUCE) + _dump(3, IN_TRAIN) + _dump(2, IN_TRAIN)
    assert analyze(incident({"console.log": "\n".join(two_odd) + "\n"})).verdict.culprit_ranks == []


def test_a_real_py_spy_bundle_of_a_hung_torchrun_names_the_rank_outside_the_collective():
    """fixtures/incidents/hang_pyspy_bundle_odd_rank: `py-spy dump --pid` of each of 4 gloo ranks, one file
    per rank; ranks 0, 1 and 3 wait in all_reduce, rank 2 sleeps in train.py."""
    from pathlib import Path

    analysis = analyze(Path(__file__).resolve().parents[1] / "fixtures" / "incidents" / "hang_pyspy_bundle_odd_rank")
    findings = analysis.incident.findings
    waiting = findings.filter(pl.col("pattern") == "STACK003")["rank"].sort().to_list()
    odd = findings.filter(pl.col("pattern") == "STACK004").select("rank", "file").rows()
    assert (waiting, odd) == ([0, 1, 3], [(2, "pyspy/rank_2.txt")])
    assert (analysis.verdict.category, analysis.verdict.state, analysis.verdict.culprit_ranks) == ("COLLECTIVE_TIMEOUT", "hung", [2])


def test_a_thread_in_a_framework_s_data_iterator_waits_for_data_whatever_the_py_spy_version():
    found = stack_waits(lines_frame(PY_SPY_FAIRSEQ))
    assert found.select("pattern", "line", "category").rows() == [("STACK001", 4, "DATA_PIPELINE")]
    # The same thread header with its main thread in an all_reduce waits in a collective instead.
    collective = [PY_SPY_FAIRSEQ[0], "    all_reduce (torch/distributed/distributed_c10d.py:1536)", "    train (fairseq_cli/train.py:274)"]
    assert stack_waits(lines_frame(collective))["pattern"].to_list() == ["STACK003"]


TORCHTITAN_DUMP = [  # pytorch/torchtitan#168: faulthandler through a `[rank0]:` prefix with no space of its own
    "[rank0]:Thread 0x00007f07a6ffd640 (most recent call first):",
    '[rank0]:  File "/home/gchauhan/my_envs/llm-amd/lib/python3.11/threading.py", line 324 in wait',
    '[rank0]:  File "/home/gchauhan/my_envs/llm-amd/lib/python3.11/queue.py", line 180 in get',
    "[rank0]:",
    "[rank0]:Thread 0x00007f13c65f5400 (most recent call first):",
    '[rank0]:  File "/home/gchauhan/my_envs/llm-amd/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3230 in scatter',
]


def test_a_dump_read_through_a_spaceless_rank_prefix_is_still_threads_waiting_and_not_a_crash(incident):
    analysis = analyze(incident({"console.log": "\n".join(TORCHTITAN_DUMP) + "\n"}))
    lines = analysis.incident.lines
    assert lines.filter(pl.col("line").is_in([1, 2, 3]))["block"].n_unique() == 1  # the header and its frames
    patterns = analysis.incident.findings["pattern"].to_list()
    assert "STACK003" in patterns and "EXC002" not in patterns
    assert analysis.verdict.state == "hung"


FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("gdb_nccl901_launch_blocked_in_group_end", [("STACK003", 18)]),  # cudaLaunchKernel under ncclGroupEndInternal
        ("gdb_nccl899_node0_group_end", [("STACK003", 12)]),  # a driver lock under ncclGroupEnd
        ("gdb_nccl901_main_thread_stream_sync", [("STACK005", 7)]),  # forward() waits in cudaStreamSynchronize
        ("gdb_nccl829_comm_abort_stream_sync", [("STACK005", 12)]),  # an abort is no collective; it waits for the GPU
    ],
)
def test_a_real_gdb_backtrace_says_what_each_thread_waited_in(fixture, expected):
    findings = analyze(FORMATS / fixture).incident.findings
    assert findings.filter(pl.col("pattern").str.starts_with("STACK")).select("pattern", "line").rows() == expected


def test_gdb_threads_are_one_block_each_and_the_blank_line_between_them_ends_one():
    lines = analyze(FORMATS / "gdb_nccl829_comm_abort_stream_sync").incident.lines
    blocks = lines.filter(pl.col("text") != "").group_by("block").agg(pl.col("line").min().alias("first"), pl.len()).sort("first")
    assert blocks.rows() == [(1, 1, 16), (18, 18, 3)]  # `Thread 58` with its 15 frames; `Thread 1` (no colon) with its 2


GDB_IN_GROUP_END = (FORMATS / "gdb_nccl899_node0_group_end" / "gdb_bt.txt").read_text().splitlines()[2:]
GDB_ON_THE_GPU = (FORMATS / "gdb_nccl901_main_thread_stream_sync" / "gdb_bt.txt").read_text().splitlines()
GDB_LOCK_WAIT = [  # pytorch/pytorch#4679: the main thread of a process stuck on a lock
    "Thread 1 (Thread 0x7f55b2b2f700 (LWP 3511)):",
    "#0  __lll_lock_wait () at ../nptl/sysdeps/unix/sysv/linux/x86_64/lowlevellock.S:136",
    "#1  0x00007f55b377b022 in _L_lock_1027 () from /home/zhangruiqing01/tools/glibc_high/glibc2.14/glibc_2_14/lib/libpthre",
]


def test_of_gdb_dumps_per_rank_the_one_neither_in_a_collective_nor_on_the_gpu_is_the_odd_one_out(incident):
    dumps = {
        "gdb/rank0.txt": GDB_IN_GROUP_END,
        "gdb/rank1.txt": GDB_IN_GROUP_END,
        "gdb/rank2.txt": GDB_LOCK_WAIT,
        "gdb/rank3.txt": GDB_ON_THE_GPU,
    }
    analysis = analyze(incident({name: "\n".join(text) + "\n" for name, text in dumps.items()}))
    findings = analysis.incident.findings
    assert findings.filter(pl.col("pattern") == "STACK004").select("rank", "line").rows() == [(2, 2)]
    assert (analysis.verdict.category, analysis.verdict.culprit_ranks, analysis.verdict.state) == ("COLLECTIVE_TIMEOUT", [2], "hung")
    # A rank waiting on its GPU may be in the same collective, seen from the device: with rank 2 in
    # the collective too, no rank stands out.
    dumps["gdb/rank2.txt"] = GDB_IN_GROUP_END
    again = analyze(incident({name: "\n".join(text) + "\n" for name, text in dumps.items()}))
    assert again.incident.findings.filter(pl.col("pattern") == "STACK004").is_empty()


# deepspeedai/DeepSpeedExamples#302 (real lines): a DeepSpeed-Chat run stuck in deepspeed.initialize.
PY_SPY_EXTENSION_LOCK = [
    'Thread 46930 (idle): "MainThread"',
    "    wait (torch/utils/file_baton.py:42)",
    "    _jit_compile (torch/utils/cpp_extension.py:1522)",
    "    load (torch/utils/cpp_extension.py:1284)",
    "    jit_load (deepspeed/ops/op_builder/builder.py:480)",
    "    load (deepspeed/ops/op_builder/builder.py:449)",
    "    __init__ (deepspeed/runtime/engine.py:377)",
    "    initialize (deepspeed/__init__.py:156)",
    'Thread 47073 (idle): "Thread-1"',
    "    wait (threading.py:324)",
    "    wait (threading.py:622)",
    "    run (tqdm/_monitor.py:60)",
]


def test_a_thread_waiting_for_an_extension_build_lock_is_the_environment():
    found = stack_waits(lines_frame(PY_SPY_EXTENSION_LOCK, rank=None))
    assert found.select("pattern", "category", "role", "line").rows() == [("STACK006", "ENVIRONMENT", "initiating", 2)]
