"""PCIe links as `lspci -vv` printed them, read from LINES.

Enters: the LINES frame (lspci output is a text file like any log, found by content, a
`LnkSta:` line: nothing depends on its name). Leaves:
  pcie_links  one row per `LnkSta:` line: host (the line's, else its folder's or the file
              name's after `lspci_`), the device header above it (`81:00.0 Ethernet
              controller: ...`: its bus id, normalized, and the rest of it; null in an excerpt
              that lost it), the speed (GT/s) and width its `LnkCap:` line says it can run
              at, the speed and width it runs at, and whether lspci marked either
              `(downgraded)`; with the LnkSta line's file, line and text.
Assumed: lspci's order, each device's lines under its unindented header and LnkCap before
LnkSta; a LnkSta with no LnkCap above it in its device has a null capability. `Speed
unknown` (no link) reads as a null speed. Older lspci prints no `(ok)`/`(downgraded)`
marks at all: the marks are what lspci said, comparing with LnkCap is the reader's job.
"""

from __future__ import annotations

import polars as pl

from forensics.ingest.fabric import host_of_file
from forensics.ingest.gpu import pci_bus_id
from forensics.schema import conform, empty

PCIE_LINKS = {
    "file": pl.String, "line": pl.Int64, "host": pl.String, "pci_bus_id": pl.String, "device": pl.String,
    "cap_speed_gts": pl.Float64, "cap_width": pl.Int32, "speed_gts": pl.Float64, "width": pl.Int32,
    "speed_downgraded": pl.Boolean, "width_downgraded": pl.Boolean, "text": pl.String,
}  # fmt: skip

HEADER = r"^(?P<bdf>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) (?P<device>.+?)\s*$"
_LINK = r"Speed (?:(?P<speed>[\d.]+)GT/s|unknown)(?P<speed_mark> \(\w+\))?, Width x(?P<width>\d+)(?P<width_mark> \(\w+\))?"
CAP = r"LnkCap:\s*(?:Port #\d+,\s*)?" + _LINK
STA = r"LnkSta:\s*" + _LINK


def sniff_pcie(head: str) -> bool:
    """Whether a file's head is lspci -vv output (a link status line)."""
    return "LnkSta:" in head


def parse_pcie(lines: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """pcie_links (see the module docstring)."""
    text = pl.col("text")
    files = lines.filter(text.str.contains("LnkSta:", literal=True))["file"].unique().implode()
    rows = lines.filter(pl.col("file").is_in(files) & (text.str.contains(r"LnkCap:|LnkSta:") | text.str.contains(HEADER)))
    if rows.is_empty():
        return {"pcie_links": empty(PCIE_LINKS)}
    header, cap, sta = text.str.extract_groups(HEADER), text.str.extract_groups(CAP), text.str.extract_groups(STA)
    # A device is its header and the lines below it; an excerpt's lines before any header are device 0.
    keyed = (
        rows.sort("file", "line")
        .with_columns(dev=text.str.contains(HEADER).cast(pl.Int32).cum_sum().over("file"))
        .with_columns(
            pl.coalesce("host", host_of_file(pl.col("file"), "lspci")).alias("host"),
            pci_bus_id=pci_bus_id(header.struct.field("bdf")).forward_fill().over("file", "dev"),
            device=header.struct.field("device").forward_fill().over("file", "dev"),
            cap_speed_gts=cap.struct.field("speed").cast(pl.Float64, strict=False).forward_fill().over("file", "dev"),
            cap_width=cap.struct.field("width").cast(pl.Int32, strict=False).forward_fill().over("file", "dev"),
            speed_gts=sta.struct.field("speed").cast(pl.Float64, strict=False),
            width=sta.struct.field("width").cast(pl.Int32, strict=False),
            speed_downgraded=sta.struct.field("speed_mark").fill_null("") == " (downgraded)",
            width_downgraded=sta.struct.field("width_mark").fill_null("") == " (downgraded)",
        )
    )
    return {"pcie_links": conform(keyed.filter(text.str.contains(STA)), PCIE_LINKS)}
