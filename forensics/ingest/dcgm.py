"""What NVIDIA DCGM's `dcgmi` printed, read from LINES: diagnostic results and NVLink link states.

Enters: the LINES frame (`dcgmi` output is a text file like any log, found by content: the
`| Diagnostic | Result |` header of `dcgmi diag`, the `NvLink Link Status` title of `dcgmi
nvlink --link-status`; nothing depends on the name). Leaves:
  dcgm_diag      one row per result of a diag table after its header: host, section
                 (Deployment, Integration, Hardware, Stress), test, result (Pass, Fail, Skip,
                 Warn), and the GPU of DCGM 4's `GPUn: Fail` rows under their test (null on
                 the test's own row), with the row's file, line and text
  nvlink_status  one row per `gpuId N:` or `physicalId N:` (an NVSwitch) entry: the line of
                 its link states (`U D X _`: up, down, disabled, not supported), how many
                 links it lists and how many are up, down and disabled
Host: the line's, else the `Executing in Pod ... on Host H` line above it (GPU operator's
wrapper), else its folder's or the file name's after `dcgmi_diag_`/`dcgmi_nvlink_`.
Assumed: a table's rows are in one file, in order; a row with an empty first cell belongs
to the test above it; a state line belongs to the entry line above it.
"""

from __future__ import annotations

import re

import polars as pl

from forensics.ingest.fabric import host_of_file
from forensics.schema import conform

DCGM_DIAG = {
    "file": pl.String, "line": pl.Int64, "host": pl.String, "section": pl.String, "test": pl.String,
    "result": pl.String, "gpu": pl.Int32, "text": pl.String,
}  # fmt: skip
NVLINK_STATUS = {
    "file": pl.String, "line": pl.Int64, "host": pl.String, "entity": pl.String, "id": pl.Int32, "links": pl.Int32,
    "up": pl.Int32, "down": pl.Int32, "disabled": pl.Int32, "text": pl.String,
}  # fmt: skip

_FILE_MARK = r"\|\s*Diagnostic\s+\|\s*Result\s+\||NvLink Link Status"
DIAG_HEADER = r"^\|\s*Diagnostic\s+\|\s*Result\s+\|"
POD_HOST = r"Executing in Pod \S+ on Host (\S+)"
SECTION = r"^[|+]-{3,}\s+(\S.*?)\s+-{3,}\+"
ROW = r"^\|\s*(?P<name>[^|]*?)\s*\|\s*(?P<value>[^|]*?)\s*\|\s*$"
RESULT = r"^(?:GPU(?P<gpu>\d+):\s*)?(?P<result>Pass|Fail|Skip|Warn)\b"
ENTRY = r"^\s*(?P<entity>gpuId|physicalId) (?P<id>\d+):\s*$"
STATES = r"^\s*[UDX_](?:\s+[UDX_])*\s*$"


def sniff_dcgm(head: str) -> bool:
    """Whether a file's head is dcgmi diag or dcgmi nvlink output."""
    return re.search(_FILE_MARK, head) is not None


def parse_dcgm(lines: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """dcgm_diag and nvlink_status (see the module docstring)."""
    text = pl.col("text")
    files = lines.filter(text.str.contains(_FILE_MARK))["file"].unique().implode()
    cand = lines.filter(
        pl.col("file").is_in(files)
        & (text.str.contains(r"^[|+]") | text.str.contains(POD_HOST) | text.str.contains(ENTRY) | text.str.contains(STATES))
    )
    # The host of every row, before the rows are narrowed to one table's.
    cand = cand.sort("file", "line").with_columns(
        pl.coalesce(
            "host", text.str.extract(POD_HOST).forward_fill().over("file"), host_of_file(pl.col("file"), r"dcgmi[_-](?:diag|nvlink)")
        )
    )
    return {"dcgm_diag": _diag(cand), "nvlink_status": _nvlink(cand)}


def _diag(cand: pl.DataFrame) -> pl.DataFrame:
    """`| test | Pass |` rows after a `| Diagnostic | Result |` header, with `|  | GPU1: Fail |` under their test."""
    text = pl.col("text")
    row = text.str.extract_groups(ROW)
    name, value = row.struct.field("name"), row.struct.field("value")
    result = value.str.extract_groups(RESULT)
    is_result = result.struct.field("result").is_not_null() & ~name.str.starts_with("Warning") & ~name.str.starts_with("Info")
    keyed = cand.with_columns(
        in_table=text.str.contains(DIAG_HEADER).cum_sum().over("file") > 0,
        section=text.str.extract(SECTION).forward_fill().over("file"),
        test=pl.when(is_result & (name != "")).then(name).forward_fill().over("file"),
        result=result.struct.field("result"),
        gpu=result.struct.field("gpu").cast(pl.Int32, strict=False),
        is_result=is_result,
    )
    return conform(keyed.filter("in_table", "is_result"), DCGM_DIAG)


def _nvlink(cand: pl.DataFrame) -> pl.DataFrame:
    """Each `gpuId N:` / `physicalId N:` entry with the `U D X _` line under it."""
    text = pl.col("text")
    entry = text.str.extract_groups(ENTRY)
    keyed = cand.filter(text.str.contains(ENTRY) | text.str.contains(STATES)).with_columns(
        entity=entry.struct.field("entity")
        .replace_strict({"gpuId": "gpu", "physicalId": "nvswitch"}, default=None)
        .forward_fill()
        .over("file"),
        id=entry.struct.field("id").cast(pl.Int32, strict=False).forward_fill().over("file"),
        links=text.str.count_matches(r"[UDX_]").cast(pl.Int32),
        up=text.str.count_matches("U", literal=True).cast(pl.Int32),
        down=text.str.count_matches("D", literal=True).cast(pl.Int32),
        disabled=text.str.count_matches("X", literal=True).cast(pl.Int32),
    )
    return conform(keyed.filter(text.str.contains(STATES) & pl.col("id").is_not_null()), NVLINK_STATUS)
