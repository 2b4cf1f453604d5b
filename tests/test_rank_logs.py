"""Text logs -> LINES: launcher prefixes, rank resolution, cleaning, blocks, hosts."""

from __future__ import annotations

import pytest

from forensics.ingest.rank_logs import TextFile, read_text_files
from tests.conftest import write_files


def ingest(tmp_path, files: dict[str, str | bytes], names: dict[str, tuple[int | None, int | None]] | None = None):
    """read_text_files over `files`; `names` gives (rank, local_rank) as discover would."""
    write_files(tmp_path, files)
    names = names or {}
    items = [TextFile(path, *names.get(path, (None, None))) for path in files]
    return read_text_files(tmp_path, items)


# Real prefix stacks (formats.md 0, 4.4, 4.5) -> global rank of the line.
PREFIXED = [
    pytest.param(
        "[rank3]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout", 3, id="c10"
    ),
    pytest.param("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB.", 3, id="excepthook"),
    pytest.param("[default3]:[rank3]: RuntimeError: All 3 implementation(s) failed for op='generic_gemm'.", 3, id="torchrun-tee"),
    pytest.param(" 3: [2024-05-08 08:47:31,877] [INFO] srun labelled line", 3, id="srun-right-aligned"),
    pytest.param("12: [2024-05-08 08:47:31,877] [INFO] srun two digits", 12, id="srun-two-digits"),
    pytest.param("P0  3: heterogeneous job line", 3, id="srun-pack"),
    pytest.param("[1,3]<stdout>:tomte401:1850301:1881341 [0] transport.cc:154 NCCL WARN Cuda failure 'invalid argument'", 3, id="mpirun"),
    pytest.param(
        "Fri Aug 11 12:31:45 2023[1,3]<stderr>:tomte401:1850301:1881341 [0] transport.cc:154 NCCL WARN Cuda failure",
        3,
        id="mpirun-timestamp",
    ),
    pytest.param(
        "(WorkerDict pid=3490362) [rank1]:[E1118 20:32:23.955028747 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught", 1, id="ray"
    ),
    pytest.param(
        "nemo.collections.llm.api.pretrain/0 [default0]:[rank0]: RuntimeError: world_size (1) is not divisible by 2", 0, id="nemo-run"
    ),
]


@pytest.mark.parametrize(("text", "rank"), PREFIXED)
def test_prefix_gives_the_global_rank(tmp_path, text, rank):
    lines, statuses, _ = ingest(tmp_path, {"console.log": text + "\n"})
    assert lines["rank"].to_list() == [rank]
    assert lines["text"][0] == text  # prefixes are kept in the text
    assert statuses[0].status == "parsed" and statuses[0].lines == 1


def test_combined_console_log_keeps_every_rank_apart(tmp_path):
    console = "".join(f"[default{r}]:[rank{r}]: step {r}\n" for r in range(4)) + " 7: srun\n"
    lines, _, _ = ingest(tmp_path, {"console.log": console})
    assert lines["rank"].to_list() == [0, 1, 2, 3, 7]
    assert lines["local_rank"].to_list() == [0, 1, 2, 3, None]


def test_rank_from_file_name_when_lines_carry_none(tmp_path):
    lines, _, findings = ingest(tmp_path, {"rank_5.log": "plain\nlines\n"}, {"rank_5.log": (5, None)})
    assert lines["rank"].to_list() == [5, 5]
    assert findings.is_empty()


def test_content_rank_wins_over_the_file_name_and_is_reported(tmp_path):
    text = "[rank7]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 7] Watchdog\n[rank7]: more\nuntagged\n"
    lines, _, findings = ingest(tmp_path, {"rank_5.log": text}, {"rank_5.log": (5, None)})
    assert lines["rank"].to_list() == [7, 7, 7]  # the untagged line follows the file's single tag
    (finding,) = findings.iter_rows(named=True)
    assert finding["pattern"] == "INPUT001"
    assert (finding["file"], finding["line"], finding["rank"]) == ("rank_5.log", 1, 7)
    assert finding["captures"] == '{"file_name_rank": 5, "prefix_rank": 7}'


def test_no_conflict_when_name_and_prefix_agree(tmp_path):
    _, _, findings = ingest(tmp_path, {"rank_6.log": "[rank6]: fine\n"}, {"rank_6.log": (6, None)})
    assert findings.is_empty()


def test_local_rank_is_mapped_to_global_from_lines_carrying_both(tmp_path):
    # Node 1 of 2: local rank 3 is global rank 11; a line with only [default3]: follows.
    text = "[default3]:[rank11]: Traceback (most recent call last):\n[default3]:I'm only tagged locally\n"
    lines, _, _ = ingest(tmp_path, {"node1.log": text})
    assert lines["rank"].to_list() == [11, 11]
    assert lines["local_rank"].to_list() == [3, 3]


def test_torchrun_log_dir_tree_gives_a_local_rank(tmp_path):
    files = {"run/attempt_0/3/stderr.log": "[default3]:[rank11]: hi\nno tag\n"}
    lines, _, _ = ingest(tmp_path, files, {"run/attempt_0/3/stderr.log": (None, 3)})
    assert lines["local_rank"].to_list() == [3, 3]
    assert lines["rank"].to_list() == [11, 11]


def test_payload_rank_tag_is_a_last_resort(tmp_path):
    text = "[2023-11-07 01:55:23,711] [INFO] [logging.py:96:log_dist] [Rank 2] step=10, skipped=4, lr=[5e-05], mom=[(0.9, 0.999)]\n"
    lines, _, _ = ingest(tmp_path, {"ds.log": text})
    assert lines["rank"].to_list() == [2]


@pytest.mark.parametrize(
    ("text", "rank"),
    [
        ("2026-11-24 08:05:56,780 INFO [rank2] step 11 | loss 2.3166 | data_time 0.124s | step_time 0.133s", 2),  # logging format
        ("[rank: 1] Seed set to 42", 1),  # Lightning
        ("[Rank 3/8] Step 120, Loss: 2.31, data_time: 12ms", 3),  # print-style trainer
        ("[RANK 5] saving checkpoint", 5),
    ],
)
def test_payload_rank_tags_in_any_case(tmp_path, text, rank):
    lines, _, _ = ingest(tmp_path, {"console.log": text + "\n"})
    assert lines["rank"].to_list() == [rank]


def test_a_tagged_record_s_untagged_frames_and_exception_are_its_rank_s(tmp_path):
    """ParlAI#4452 (real lines): the logger tags the record's first line only."""
    text = 'rank:  3 | 2022-04-03 18:44:26,615 CRITICAL | Traceback (most recent call last):\n  File "/mnt/lustre/zhaojianqiao/ParlAI/parlai/core/torch_generator_agent.py", line 605, in _fake_forward_backward_pass\n    self.backward(loss)\n  File "/mnt/lustre/zhaojianqiao/ParlAI/parlai/core/torch_agent.py", line 2314, in backward\nRuntimeError: CUDA out of memory. Tried to allocate 21.06 GiB (GPU 3; 79.35 GiB total capacity; 63.19 GiB already allocated; 8.57 GiB free; 68.48 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n'
    lines, _, _ = ingest(tmp_path, {"console.log": text})
    assert lines["rank"].to_list() == [3] * 5
    lines, _, _ = ingest(tmp_path, {"console.log": "INFO starting\n" + text.split("\n", 1)[1]})
    assert lines["rank"].to_list() == [None] * 5  # an untagged record stays untagged


def test_a_prefix_glued_after_a_progress_bar_starts_that_rank_s_part_of_the_line(tmp_path):
    text = (
        "Tokenizing Prompts (num_proc=64):  92%|#########1| 328986/359152 [29:58<12:05, 41.59 examples/s][rank1]:"
        "[W516 14:34:56.853490829 socket.cpp:464] [c10d] waitForInput: poll for socket returned 0, likely a timeout\n"
        "[default0]:[rank0]:[E1123 00:52:57.664949121 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout\n"
        "waiting for [rank3]: it never came\n"
    )
    lines, _, _ = ingest(tmp_path, {"console.log": text})
    assert lines["line"].to_list() == [1, 1, 2, 3]
    assert lines["rank"].to_list() == [None, 1, 0, None]
    assert lines["text"][1].startswith("[rank1]:[W516") and lines["text"][0].endswith("examples/s]")


def test_carriage_returns_split_but_keep_the_physical_line_number(tmp_path):
    text = (
        "first\n"
        "Epoch 0:   1%|          | 1/10 [00:01<00:09,  1.00it/s]\r"
        "Epoch 0:   2%|          | 2/10 [00:02<00:08,  1.00it/s, loss=3.1]\r"
        "[rank0]:[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout\n"
        "last\n"
    )
    lines, statuses, _ = ingest(tmp_path, {"rank_0.log": text}, {"rank_0.log": (0, None)})
    assert lines["line"].to_list() == [1, 2, 2, 2, 3]
    assert lines["text"][3].startswith("[rank0]:[E709")
    assert lines["time"][3] is not None
    assert statuses[0].lines == 3


def test_windows_line_endings_leave_no_empty_rows(tmp_path):
    lines, _, _ = ingest(tmp_path, {"rank_0.log": "a\r\nb\r\n"}, {"rank_0.log": (0, None)})
    assert lines.select("line", "text").rows() == [(1, "a"), (2, "b")]


def test_ansi_colours_are_stripped(tmp_path):
    raw = "[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO - \x1b[31mstep: 22  \x1b[32mloss:  6.2250  \x1b[33mmemory:  1.41GiB(1.79%)\x1b[39m\n"
    lines, _, _ = ingest(tmp_path, {"rank_0.log": raw})
    assert lines["text"][0] == "[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO - step: 22  loss:  6.2250  memory:  1.41GiB(1.79%)"


def test_python_traceback_is_one_block_with_its_exception_line(tmp_path):
    text = (
        "[default3]:[rank3]: before\n"
        "[default3]:[rank3]: Traceback (most recent call last):\n"
        '[default3]:[rank3]:   File "/workspace/train.py", line 88, in <module>\n'
        "[default3]:[rank3]:     loss = model(batch)\n"
        "[default3]:[rank3]:            ^^^^^^^^^^^^\n"
        "[default3]:[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB.\n"
        "[default3]:[rank3]: after\n"
    )
    lines, _, _ = ingest(tmp_path, {"console.log": text})
    assert lines["block"].to_list() == [1, 2, 2, 2, 2, 2, 7]


def test_chained_tracebacks_stay_in_one_block(tmp_path):
    text = (
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in f\n'
        "KeyError: 'x'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in g\n'
        "RuntimeError: boom\n"
        "next\n"
    )
    lines, _, _ = ingest(tmp_path, {"rank_0.log": text}, {"rank_0.log": (0, None)})
    blocks = dict(zip(lines["line"], lines["block"], strict=True))
    assert {blocks[n] for n in (1, 2, 3, 5, 7, 8, 9)} == {1}
    assert blocks[10] == 10


def test_cpp_stack_is_one_block_with_the_exception_line(tmp_path):
    text = (
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
        "\n"
        "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f2ab3d6c446 in /usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)\n"
        "frame #1: c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool) + 0x118 (0x7f2ab3cd0f2e in /usr/local/lib/python3.10/dist-packages/torch/lib/libc10_cuda.so)\n"
        "[2024-05-08 08:47:40,001] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 4242 closing signal SIGTERM\n"
    )
    lines, _, _ = ingest(tmp_path, {"rank_2.log": text}, {"rank_2.log": (2, None)})
    blocks = dict(zip(lines["line"], lines["block"], strict=True))
    assert {blocks[n] for n in (1, 2, 3, 4, 6, 7, 8)} == {1}
    assert blocks[9] == 9  # the line after a C++ stack is not part of it


def test_watchdog_terminate_stack_is_one_block(tmp_path):
    text = (
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout\n"
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 (most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f in /x/libc10.so)\n"
    )
    lines, _, _ = ingest(tmp_path, {"rank_0.log": text}, {"rank_0.log": (0, None)})
    assert lines["block"].to_list() == [1, 1, 1, 1]


def test_megatron_metric_lines_are_not_traceback_frames(tmp_path):
    text = (
        " iteration      122/  250000 | consumed samples:       124928 | lm loss: 2.504220E+00 | loss scale: 1.0 |\n"
        " iteration      123/  250000 | consumed samples:       125952 | lm loss: 2.493043E+00 | loss scale: 1.0 |\n"
        "Traceback (most recent call last):\n"
    )
    lines, _, _ = ingest(tmp_path, {"rank_7.log": text}, {"rank_7.log": (7, None)})
    assert lines["block"].to_list() == [1, 2, 3]


def test_interleaved_ranks_keep_separate_blocks(tmp_path):
    text = (
        "[rank0]: Traceback (most recent call last):\n"
        "[rank1]: unrelated line from rank 1\n"
        '[rank0]:   File "train.py", line 3, in <module>\n'
        "[rank0]: ValueError: bad\n"
    )
    lines, _, _ = ingest(tmp_path, {"console.log": text})
    assert lines.select("line", "rank", "block").rows() == [(1, 0, 1), (2, 1, 2), (3, 0, 1), (4, 0, 1)]


def test_host_comes_from_nccl_prefixes(tmp_path):
    files = {
        "rank_3.log": (
            "host-2:38610:38610 [0] NCCL INFO Bootstrap : Using enp179s0f0:198.18.2.2<0>\n"
            "host-2:38610:38610 [0] NCCL INFO comm 0x1277bf60 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 65000 commId 0xbd10cc2bcb56e132 - Init START\n"
            "plain line of rank 3\n"
        ),
        "rank_4.log": (
            "plain line of rank 4 before NCCL speaks\n"
            "[2026-03-03 12:11:38] tpgds-aihub0007:185303:186751 [1] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion from peer 10.99.91.63<51161>\n"
        ),
        "rank_5.log": "no NCCL here\n",
    }
    lines, _, _ = ingest(tmp_path, files, {"rank_3.log": (3, None), "rank_4.log": (4, None), "rank_5.log": (5, None)})
    assert lines.select("rank", "host").rows() == [
        (3, "host-2"),
        (3, "host-2"),
        (3, "host-2"),
        (4, "tpgds-aihub0007"),
        (4, "tpgds-aihub0007"),
        (5, None),
    ]


def test_blank_lines_are_dropped_but_numbering_is_physical(tmp_path):
    lines, statuses, _ = ingest(tmp_path, {"rank_0.log": "a\n\n   \nb\n"}, {"rank_0.log": (0, None)})
    assert lines.select("line", "text").rows() == [(1, "a"), (4, "b")]
    assert statuses[0].lines == 4


def test_no_files_gives_empty_frames(tmp_path):
    lines, statuses, findings = read_text_files(tmp_path, [])
    assert lines.is_empty() and statuses == [] and findings.is_empty()


def test_torchrun_tree_local_rank_is_global_on_a_single_node_console(tmp_path):
    """rank 3 never raised, so no `[rank3]:` tag exists; its tree folder and `[default3]:` still name it."""
    from forensics.ingest.rank_logs import TextFile, read_text_files

    (tmp_path / "console.log").write_text("[default0]:[rank0]: RuntimeError: boom\n[default3]:2026-11-21 20:00:18,001 INFO step 11\n")
    tree = tmp_path / "attempt_0" / "3"
    tree.mkdir(parents=True)
    (tree / "stdout.log").write_text("2026-11-21 20:00:18,001 INFO step 11\n")
    lines, _, _ = read_text_files(tmp_path, [TextFile("console.log", None), TextFile("attempt_0/3/stdout.log", None, 3)])
    assert lines.sort("file", "line")["rank"].to_list() == [3, 0, 3]


def test_multi_node_console_does_not_guess_from_local_ranks(tmp_path):
    from forensics.ingest.rank_logs import TextFile, read_text_files

    (tmp_path / "console.log").write_text("[default0]:[rank0]: a\n[default0]:[rank4]: b\n[default1]:[rank5]: c\n[default2]:untagged\n")
    lines, _, _ = read_text_files(tmp_path, [TextFile("console.log", None)])
    assert lines.sort("line")["rank"].to_list() == [0, 4, 5, None]


def test_platform_timestamp_with_a_colon_before_mpirun_tags(tmp_path):
    """Real Open MPI output behind a platform timestamp (NVIDIA/nccl#230): the tag still gives the rank."""
    line = "2019-06-02T16:13:44.884Z: [1,12]<stdout>:container-e275-1553839402050-12124-01-000057:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error\n"
    write_files(tmp_path, {"console.log": line})
    lines, _, _ = read_text_files(tmp_path, [TextFile("console.log", None)])
    assert lines["rank"].to_list() == [12]
