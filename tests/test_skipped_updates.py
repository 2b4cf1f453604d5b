"""Steps skipped on NaN gradients to the end of the log are a numerical failure; a warm-up's few are not."""

from __future__ import annotations

from forensics.flow import analyze

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
