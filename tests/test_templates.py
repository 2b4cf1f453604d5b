"""One message is one template, whatever the launcher, timestamp or numbers around it."""

from __future__ import annotations

import polars as pl

from forensics.passes.templates import error_template


def _templates(lines: list[str]) -> list[str]:
    return pl.DataFrame({"text": lines}).select(error_template(pl.col("text")))["text"].to_list()


def test_a_leading_timestamp_or_glog_header_is_not_part_of_the_message():
    # espnet#186 (real line), the same message as logged bare, and under a glog header.
    stamped, bare, glog = _templates(
        [
            "2018-05-23 13:05:04,260 (e2e_asr_attctc:88) WARNING: loss (=250000064.000000) is not correct",
            "(e2e_asr_attctc:88) WARNING: loss (=1500000000.000000) is not correct",
            "W0523 13:05:12.361000 4242 (e2e_asr_attctc:88) WARNING: loss (=250000048.000000) is not correct",
        ]
    )
    assert stamped == bare == glog == "(e<n>e_asr_attctc:<n>) WARNING: loss (=<n>) is not correct"


def test_a_date_inside_the_message_stays():
    [template] = _templates(["RuntimeError: checkpoint from 2024-05-01 12:00:00 is corrupt"])
    assert template == "RuntimeError: checkpoint from <n>-<n>-<n> <n>:<n>:<n> is corrupt"
