"""Native crashes (failed asserts, caught segfaults) classified by where they happened."""

from __future__ import annotations

from forensics.flow import analyze
from tests.conftest import write_files

# Real lines: NeMo async checkpoint save on HPC-X (UCX prints the backtrace), NVIDIA/NeMo thread;
# llm.c under mpirun (glibc assert, then Open MPI's report), karpathy/llm.c thread (fixtures/public).
ZIP_WRITER_SEGFAULT = """\
[c608-061:2760180:0:2760180] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x400581d86000)
[NeMo I 2025-10-08 23:27:54 nemo_logging:393] Scheduled async checkpoint save for /ckpt/step=936-epoch=0-last.ckpt
==== backtrace (tid:2760180) ====
 0  /opt/hpcx/ucx/lib/libucs.so.0(ucs_handle_error+0x2cc) [0x4000f1ce278c]
 1  /opt/hpcx/ucx/lib/libucs.so.0(+0x3293c) [0x4000f1ce293c]
 3  linux-vdso.so.1(__kernel_rt_sigreturn+0) [0x400038ac07f0]
 4  /usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cpu.so(+0x452b904) [0x40003edab904]
 6  /usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cpu.so(mz_zip_writer_add_mem_ex_v2+0x3c8) [0x40003ed9e308]
"""
DATALOADER_ASSERT = """\
train_gpt2cu: llmc/dataloader.h:186: void dataloader_init(DataLoader*, const char*, size_t, size_t, int, int, int): Assertion `shard_ntok >= (int64_t) (num_processes * B * T + 1)' failed.
[149-130-218-240:10944] *** Process received signal ***
[149-130-218-240:10944] Signal: Aborted (6)
[149-130-218-240:10944] Signal code:  (-6)
[149-130-218-240:10944] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x42520)[0x7f21acc42520]
[149-130-218-240:10944] [ 1] /lib/x86_64-linux-gnu/libc.so.6(pthread_kill+0x12c)[0x7f21acc969fc]
"""


def _verdict(tmp_path, text):
    write_files(tmp_path, {"console.log": text})
    return analyze(tmp_path).verdict


def test_segfault_in_the_zip_writer_is_a_checkpoint_failure(tmp_path):
    verdict = _verdict(tmp_path, ZIP_WRITER_SEGFAULT)
    assert verdict.category == "CHECKPOINT_IO" and verdict.state == "crashed"
    assert verdict.first_failure["line"] == 1  # the crash line is cited; the frame that decided is in its captures


def test_failed_assert_in_a_data_loader_is_a_data_pipeline_failure(tmp_path):
    verdict = _verdict(tmp_path, DATALOADER_ASSERT)
    assert verdict.category == "DATA_PIPELINE" and verdict.state == "crashed"
    assert verdict.first_failure["line"] == 1


def test_a_crash_in_libc_only_stays_unknown_but_crashed(tmp_path):
    verdict = _verdict(tmp_path, "\n".join(DATALOADER_ASSERT.splitlines()[1:]) + "\n")
    assert verdict.category == "UNKNOWN" and verdict.state == "crashed"


def test_frames_far_below_the_crash_do_not_decide(tmp_path):
    lines = ZIP_WRITER_SEGFAULT.splitlines()
    text = "\n".join([lines[0], *(f"[NeMo I 2025-10-08 23:27:55 nemo_logging:393] step {i}" for i in range(60)), *lines[2:]]) + "\n"
    assert _verdict(tmp_path, text).category == "UNKNOWN"
