"""Steps skipped on NaN gradients to the end of the log are a numerical failure; a warm-up's few are not."""

from __future__ import annotations

import pytest

from forensics.catalog import load_catalog
from forensics.catalog.match import match_catalog
from forensics.flow import analyze
from forensics.passes.skipped_updates import persistent_skips
from tests.conftest import lines_frame

# ESPnet#3170 (real lines): skips at step after step, to the last line.
SKIP = "[user] 2021-04-23 19:22:5{}.229 (trainer:581) WARNING: The grad norm is nan. Skipping updating the model."
PROGRESS = (
    "[user] 2021-04-23 19:22:56,245 (trainer:636) INFO: 2epoch:train:12009-12640batch: iter_time=3.163e-04, "
    "forward_time=0.110, loss=65.129, loss_att=124.079, loss_ctc=144.685, acc=0.065, backward_time=0.086, "
    "optim0_lr0=1.485e-05, train_time=0.624"
)


def _verdict(tmp_path, lines):
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    return analyze(tmp_path).verdict


def test_skips_that_go_on_to_the_end_of_the_log_are_numerical(tmp_path):
    verdict = _verdict(tmp_path, [SKIP.format(i) for i in range(4)] + [PROGRESS, SKIP.format(8)])
    assert (verdict.category, verdict.state) == ("NUMERICAL", "diverged")
    assert "5 training steps skipped" in verdict.summary


# ESPnet#186 (real lines): batches whose loss ESPnet throws away as absurd, one skipped update among them.
DISCARDED = [
    "2018-05-23 13:05:04,260 (e2e_asr_attctc:88) WARNING: loss (=250000064.000000) is not correct",
    "2018-05-23 13:05:12,361 (e2e_asr_attctc:88) WARNING: loss (=1500000000.000000) is not correct",
    "2018-05-23 13:05:13,682 (asr_chainer:132) WARNING: grad norm is nan. Do not update model.",
    "2018-05-23 13:05:14,925 (e2e_asr_attctc:88) WARNING: loss (=250000048.000000) is not correct",
]


def test_discarded_losses_to_the_end_of_the_log_count_with_skipped_steps(tmp_path):
    verdict = _verdict(tmp_path, DISCARDED)
    assert (verdict.category, verdict.state) == ("NUMERICAL", "diverged")
    assert "4 training steps skipped" in verdict.summary
    assert (
        _verdict(tmp_path, DISCARDED[:2] + [PROGRESS.replace("12009-12640", f"{n}-{n + 631}") for n in range(12009, 18009, 632)]).category
        != "NUMERICAL"
    )


def test_a_few_skips_that_stop_are_a_warm_up_not_a_failure(tmp_path):
    warm_up = [SKIP.format(i) for i in range(4)] + [PROGRESS.replace("12009-12640", f"{n}-{n + 631}") for n in range(12009, 18009, 632)]
    assert _verdict(tmp_path, warm_up).category != "NUMERICAL"
    assert _verdict(tmp_path, [SKIP.format(1), SKIP.format(2)]).category != "NUMERICAL"


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
