"""HANG009: every log stops on PyTorch's extensions-root line, waiting on the build lock."""

from __future__ import annotations

import polars as pl

from forensics.passes.extension_build import stuck_at_extension_build
from tests.conftest import lines_frame

# OpenRLHF/OpenRLHF#208 (real lines): three ranks of a multi-node SFT job, then nothing.
STUCK = ["Using  .cache/torch_extensions/py310_cu118 as PyTorch extensions root..."] * 3
# NVlabs/nvdiffrec#39 (real lines): the lock warning, the root line, then nothing.
STUCK_WINDOWS = [
    "Encoder output: 32 dims",
    "Warning: Lock file exists in build directory: 'C:\\Users\\AppData\\Local\\torch_extensions\\torch_extensions\\Cache\\py39_cu113\\renderutils_plugin\\lock'",
    "Using C:\\Users\\AppData\\Local\\torch_extensions\\torch_extensions\\Cache\\py39_cu113 as PyTorch extensions root...",
    "",
]
# A build that went through: the loader goes on past the root line.
BUILT = [
    "Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...",
    "Detected CUDA files, patching ldflags",
    "Emitting ninja build file /root/.cache/torch_extensions/py310_cu121/fused_adam/build.ninja...",
    "Loading extension module fused_adam...",
    "Time to load fused_adam op: 0.52 seconds",
]


def test_every_log_ending_on_the_extensions_root_line_waits_on_the_build_lock():
    for texts in (STUCK, STUCK_WINDOWS):
        found = stuck_at_extension_build(lines_frame(texts, rank=None))
        assert found.select("pattern", "category", "role").rows() == [("HANG009", "ENVIRONMENT", "initiating")]
        assert found["text"][0].endswith("as PyTorch extensions root...")


def test_a_build_that_went_on_and_a_log_that_went_on_elsewhere_are_no_hang():
    assert stuck_at_extension_build(lines_frame(BUILT, rank=None)).is_empty()
    two_logs = pl.concat([lines_frame(STUCK, file="rank_0.log", rank=0), lines_frame(BUILT, file="rank_1.log", rank=1)])
    assert stuck_at_extension_build(two_logs).is_empty()
