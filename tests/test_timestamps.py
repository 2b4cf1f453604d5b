"""Line timestamps: every format the module claims, invalid dates as null, offsets, years."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

from forensics.ingest.timestamps import infer_year, line_time


def times(texts: list[str], year: int = 2025) -> list[datetime | None]:
    return pl.DataFrame({"text": texts}).select(line_time(pl.col("text"), year).alias("time"))["time"].to_list()


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Python logging asctime (comma milliseconds)
        ("2024-05-08 08:47:31,877 - INFO - step 1", utc(2024, 5, 8, 8, 47, 31, 877000)),
        # NCCL >= 2.26 WARN timestamp
        (
            "[2026-03-03 12:11:38] tpgds-aihub0007:185303:186751 [1] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion",
            utc(2026, 3, 3, 12, 11, 38),
        ),
        # ISO with microseconds after a comma and an explicit offset
        ("2024-04-29T14:55:41,679700+02:00 node kernel: x", utc(2024, 4, 29, 12, 55, 41, 679700)),
        ("2024-05-08T08:47:31Z zulu", utc(2024, 5, 8, 8, 47, 31)),
        ("2024-05-08T08:47:31-0530 west", utc(2024, 5, 8, 14, 17, 31)),
        # Talos-style kmsg with nanoseconds: truncated to microseconds
        (
            "192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: NVRM: Xid (PCI:0000:0b:00): 154",
            utc(2026, 4, 22, 21, 30, 51, 870495),
        ),
        # nvidia-smi --query-gpu CSV
        ("2024/01/05 10:11:12.345, NVIDIA H100 80GB HBM3, 00000000:00:09.0", utc(2024, 1, 5, 10, 11, 12, 345000)),
        # torchrun/glog with 6-digit microseconds: year from the default
        (
            "[W0709 17:05:39.816000 140 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM",
            utc(2025, 7, 9, 17, 5, 39, 816000),
        ),
        # c10 with a 9-digit monotonic fraction: second precision only; month not zero-padded (E709 = Jul 9)
        (
            "[rank0]:[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout",
            utc(2025, 7, 9, 17, 5, 38),
        ),
        ("[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog", utc(2025, 12, 6, 18, 44, 12)),
        # dmesg -T ctime
        ("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>'", utc(2024, 8, 30, 11, 43, 9)),
        # OpenMPI --timestamp-output glued to the tag
        (
            "Fri Aug 11 12:31:45 2023[1,0]<stdout>:tomte401:1850301:1881341 [0] transport.cc:154 NCCL WARN Cuda failure",
            utc(2023, 8, 11, 12, 31, 45),
        ),
        # syslog without a year
        ("May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.", utc(2025, 5, 18, 19, 2, 39)),
        # Megatron's bracketed time
        (" [2024-04-06 02:56:58] iteration       15/     100 | consumed samples:         1920 |", utc(2024, 4, 6, 2, 56, 58)),
        ("plain line without a time", None),
        ("[rank3]: Traceback (most recent call last):", None),
    ],
)
def test_formats(text, expected):
    assert times([text]) == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "2024-13-08 08:47:31,877 month 13",
        "2024-02-30 08:47:31 Feb 30",
        "2023-02-29 00:00:00 not a leap year",
        "1900-02-29 00:00:00 century, not a leap year",
        "2024-04-31 10:00:00 April has 30 days",
        "2024-05-08 25:00:00 hour 25",
        "2024/00/05 10:11:12.345 month 0",
        "[E0230 08:47:31.123456 x.cc:1] glog Feb 30",
        "[E1301 08:47:31.123456 x.cc:1] glog month 13",
        "Fri Feb 30 11:43:09 2024 ctime Feb 30",
        "Feb 30 19:02:39 kernel: syslog Feb 30",
    ],
)
def test_impossible_dates_are_null_not_errors(text):
    assert times([text]) == [None]


def test_one_bad_date_does_not_spoil_the_column():
    got = times(["2024-02-30 08:47:31 bad", "2024-02-29 08:47:31 leap day", "x"])
    assert got == [None, utc(2024, 2, 29, 8, 47, 31), None]


def test_leap_second_is_clamped():
    assert times(["2016-12-31 23:59:60 leap second"]) == [utc(2016, 12, 31, 23, 59, 59)]


def test_yearless_formats_take_the_default_year():
    assert times(["May 18 19:02:39 kernel: x"], year=2019) == [utc(2019, 5, 18, 19, 2, 39)]


def test_dtype_is_utc_microseconds():
    frame = pl.DataFrame({"text": ["2024-05-08 08:47:31,877"]}).select(line_time(pl.col("text"), 2024).alias("time"))
    assert frame.schema["time"] == pl.Datetime("us", "UTC")


def test_infer_year_takes_the_most_common_full_year():
    texts = pl.Series(["2023-01-01 10:00:00 a", "2023/02/01 10:00:00.1 b", "2024-01-01T00:00:00 c", "E0709 x"])
    assert infer_year(texts, fallback=1999) == 2023


def test_infer_year_falls_back_without_full_dates():
    assert infer_year(pl.Series(["[E709 17:05:38.162555850 x.cpp:1] y", "May 18 19:02:39 k"]), fallback=2021) == 2021
