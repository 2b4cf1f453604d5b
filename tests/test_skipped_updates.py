"""Skipped optimizer steps that go on to the end of the log (METRIC013), from real lines."""

from __future__ import annotations

import pytest

from forensics.catalog import load_catalog
from forensics.catalog.match import match_catalog
from forensics.passes.skipped_updates import persistent_skips
from tests.conftest import lines_frame

# NVIDIA/Megatron-LM#602: fp16 gradients overflow at every step, the scale holds at 16384.
MEGATRON_EVERY_STEP_SKIPPED = [
    " iteration        1/ 2753818 | consumed samples:            8 | elapsed time per iteration (ms): 5801.1 | learning rate: 1.000E-07 | global batch size:     8 | loss scale: 16384.0 | number of skipped iterations:   1 | number of nan iterations:   0 |",
    "[Rank 0] (after 1 iterations) memory (MB) | allocated: 33437.7109375 | max allocated: 61396.447265625 | reserved: 61620.0 | max reserved: 61620.0",
    " iteration        2/ 2753818 | consumed samples:           16 | elapsed time per iteration (ms): 1152.3 | learning rate: 1.000E-07 | global batch size:     8 | loss scale: 16384.0 | number of skipped iterations:   1 | number of nan iterations:   0 |",
    " iteration        3/ 2753818 | consumed samples:           24 | elapsed time per iteration (ms): 1118.1 | learning rate: 1.000E-07 | global batch size:     8 | loss scale: 16384.0 | number of skipped iterations:   1 | number of nan iterations:   0 |",
    " iteration        4/ 2753818 | consumed samples:           32 | elapsed time per iteration (ms): 1119.8 | learning rate: 1.000E-07 | global batch size:     8 | loss scale: 16384.0 | number of skipped iterations:   1 | number of nan iterations:   0 |",
]
# The dynamic scaler's warm-up from 2**32: a skip per iteration while the scale halves (public
# Megatron-LM logs; the third line from a run that logged every 10 iterations).
MEGATRON_WARM_UP = [
    "iteration        1/  508626 | consumed samples:          288 | elapsed time per iteration (ms): 255940.5 | learning rate: 0.000E+00 | global batch size:   288 | loss scale: 4294967296.0 | number of skipped iterations:   1 | number of nan iterations:   0 |",
    "iteration        2/  508626 | consumed samples:          576 | elapsed time per iteration (ms): 243438.3 | learning rate: 0.000E+00 | global batch size:   288 | loss scale: 2147483648.0 | number of skipped iterations:   1 | number of nan iterations:   0 |",
    " iteration       10/ 1000000 | consumed samples:           40 | elapsed time per iteration (ms): 356.2 | learning rate: 0.000E+00 | global batch size:     4 | loss scale: 8388608.0 | number of skipped iterations:  10 | number of nan iterations:   0 |",
]
# espnet/espnet#4095: HuBERT ASR whose gradient norm is NaN at step after step.
ESPNET_SKIPS = [
    "[7cc1303a881b:0/8] 2022-02-21 11:42:05,031 (trainer:617) WARNING: The grad norm is nan. Skipping updating the model.",
    "[7cc1303a881b:0/8] 2022-02-21 11:44:13,348 (trainer:617) WARNING: The grad norm is nan. Skipping updating the model.",
    "[7cc1303a881b:0/8] 2022-02-21 11:45:47,820 (trainer:617) WARNING: The grad norm is nan. Skipping updating the model.",
    "[7cc1303a881b:0/8] 2022-02-21 11:46:53,100 (trainer:617) WARNING: The grad norm is nan. Skipping updating the model.",
]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _skips(texts: list[str], catalog) -> list[int]:
    lines = lines_frame(texts)
    return persistent_skips(match_catalog(lines, catalog), lines)["line"].to_list()


def test_every_megatron_iteration_skipped_to_the_end_is_persistent(catalog):
    assert _skips(MEGATRON_EVERY_STEP_SKIPPED, catalog) == [5]


def test_the_loss_scalers_warm_up_is_not_persistent(catalog):
    assert _skips(MEGATRON_WARM_UP, catalog) == []


def test_skips_that_stop_before_the_end_are_not_persistent(catalog):
    healthy_tail = [
        " iteration       30/    1000 | consumed samples:          120 | elapsed time per iteration (ms): 1439.3 | learning rate: 1.500E-04 | global batch size:     4 | lm loss: 2.667133E+01 | loss scale: 16384.0 | grad norm: 73.338 | number of skipped iterations:   1 | number of nan iterations:   0 |"
    ] * 6
    assert _skips(MEGATRON_EVERY_STEP_SKIPPED + healthy_tail, catalog) == []


def test_espnet_skips_to_the_end_are_persistent(catalog):
    assert _skips(ESPNET_SKIPS, catalog) == [4]
