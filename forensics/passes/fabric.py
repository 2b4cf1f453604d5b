"""The cluster's own state as findings: InfiniBand ports, PCIe links and DCGM's checks, per host.

Enters: the `ib_ports` frame of ingest.fabric, `pcie_links` of ingest.pcie, `dcgm_diag` and
`nvlink_status` of ingest.dcgm (each with the host its file names). Leaves: FINDINGS rows,
each citing its line and naming its host:
  FABRIC001 (NETWORK, critical, initiating): an InfiniBand port whose State is not Active
            (Down, Init, Armed), naming its CA. A port that is Disabled (turned off) and that
            no other host has Active is a spare or unused port: a warning event, never a verdict
  FABRIC002 (HARDWARE, error, symptom): a PCIe link narrower than it can run (x8 of x16), or
            marked `Width ... (downgraded)` by lspci where its LnkCap line was not kept
  FABRIC003 (HARDWARE, warning, event): a PCIe link at full width but slower than it can
            run. Idle GPUs drop to 2.5 GT/s to save power, so this alone is a note for a
            check under load, never a verdict
  DCGM001   (HARDWARE, critical, initiating): a `dcgmi diag` test that Failed, on its GPU when
            the table names one (a test's own Fail row is left out when GPU rows follow it)
  DCGM002   (HARDWARE, critical, initiating): a GPU or NVSwitch with NVLinks Down
  FABRIC004 (symptom, error): an nccl-tests run that listed its devices and never printed a
            result row nor a wrong value: it hung in its first collective (or was stopped, or
            the paste was cut there). On one host that is ENVIRONMENT: GPU peer-to-peer
            traffic blocked by PCIe ACS or the IOMMU is NCCL's documented cause of a test
            that hangs at start; across hosts, NETWORK. Errors a run printed outrank it.
A host fault is a fault of that host whatever the ranks then report: the NCCL errors and
timeouts on every rank are what it costs them, and the verdict names the host.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty


def fabric_findings(ib_ports: pl.DataFrame | None) -> pl.DataFrame:
    """FABRIC001 per InfiniBand port that is not Active."""
    if ib_ports is None or ib_ports.is_empty():
        return empty(FINDINGS)
    active = pl.col("state").str.to_lowercase() == "active"
    # The same CA port Active on another host: this host's copy of it should be up too.
    up_elsewhere = (active.cast(pl.Int32).sum().over("ca", "port") > 0).fill_null(False)
    turned_off = (pl.col("physical_state").str.to_lowercase() == "disabled").fill_null(False) & ~up_elsewhere
    down = ib_ports.with_columns(turned_off=turned_off).filter(~active.fill_null(False))
    found = down.select(
        "file", "line", "host", "text",
        pattern=pl.lit("FABRIC001"),
        title=pl.format("InfiniBand port {} port {} is {} (physical state {})", "ca", "port", "state", pl.col("physical_state").fill_null("unknown")),
        category=pl.lit("NETWORK"),
        severity=pl.when("turned_off").then(pl.lit("warning")).otherwise(pl.lit("critical")),
        role=pl.when("turned_off").then(pl.lit("event")).otherwise(pl.lit("initiating")),
        captures=pl.struct("ca", "ca_type", "port", "state", "physical_state", "rate_gbps").struct.json_encode(),
    )  # fmt: skip
    return conform(found, FINDINGS)


# nccl-tests' own failure report (common.cu): `Test NCCL failure common.cu:959 'internal error'`, `Test failure common.cu:844`.
TEST_FAILURE = r"\bTest (?:NCCL |CUDA )?failure\b"


def stalled_test_runs(runs: pl.DataFrame | None, lines: pl.DataFrame) -> pl.DataFrame:
    """FABRIC004 per nccl-tests run with ranks listed, no result row and no failure report of its
    own after its header (see the module's notes)."""
    if runs is None or runs.is_empty():
        return empty(FINDINGS)
    failed = lines.filter(pl.col("text").str.contains(TEST_FAILURE)).group_by("file").agg(_failure=pl.col("line").max())
    stalled = (
        runs.join(failed, on="file", how="left")
        .filter(pl.col("sizes").is_null() & pl.col("wrong").is_null() & (pl.col("ranks") > 1))
        .filter(pl.col("_failure").is_null() | (pl.col("_failure") < pl.col("line")))
    )
    one_host = pl.col("hosts").list.len() == 1
    found = stalled.select(
        "file", "line", "text",
        host=pl.when(one_host).then(pl.col("hosts").list.first()),
        pattern=pl.lit("FABRIC004"),
        title=pl.format("nccl-tests on {} GPUs listed its devices and printed no result: it hung in its first collective", "ranks"),
        category=pl.when(one_host).then(pl.lit("ENVIRONMENT")).otherwise(pl.lit("NETWORK")),
        severity=pl.lit("error"),
        role=pl.lit("symptom"),
        captures=pl.struct("ranks", "gpu_model", hosts=pl.col("hosts").list.join(", ")).struct.json_encode(),
    )  # fmt: skip
    return conform(found, FINDINGS)


def pcie_findings(pcie_links: pl.DataFrame | None) -> pl.DataFrame:
    """FABRIC002 per PCIe link narrower than it can run, FABRIC003 per one at full width but slower."""
    if pcie_links is None or pcie_links.is_empty():
        return empty(FINDINGS)
    cap_width, cap_speed = pl.col("cap_width"), pl.col("cap_speed_gts")
    narrow = ((pl.col("width") < cap_width) | (cap_width.is_null() & pl.col("width_downgraded"))).fill_null(False)
    slow = ((pl.col("speed_gts") < cap_speed) | (cap_speed.is_null() & pl.col("speed_downgraded"))).fill_null(False)
    device = pl.coalesce(pl.format("{} {}", pl.col("pci_bus_id").str.slice(9), "device"), pl.lit("device not shown"))
    of_cap = pl.when(cap_width.is_not_null()).then(pl.format("of x{}", cap_width)).otherwise(pl.lit("(lspci: downgraded)"))
    of_speed = pl.when(cap_speed.is_not_null()).then(pl.format("of {} GT/s", _gts(cap_speed))).otherwise(pl.lit("(lspci: downgraded)"))
    link = ("file", "line", "host", "pci_bus_id", "text")
    details = pl.struct("device", "cap_speed_gts", "cap_width", "speed_gts", "width", "speed_downgraded", "width_downgraded")
    narrower = pcie_links.filter(narrow).select(
        *link,
        pattern=pl.lit("FABRIC002"),
        title=pl.format("PCIe link narrower than it can run: x{} {} ({})", "width", of_cap, device),
        category=pl.lit("HARDWARE"), severity=pl.lit("error"), role=pl.lit("symptom"),
        captures=details.struct.json_encode(),
    )  # fmt: skip
    slower = pcie_links.filter(slow & ~narrow).select(
        *link,
        pattern=pl.lit("FABRIC003"),
        title=pl.format("PCIe link slower than it can run: {} GT/s {} at full width ({})", _gts(pl.col("speed_gts")), of_speed, device),
        category=pl.lit("HARDWARE"), severity=pl.lit("warning"), role=pl.lit("event"),
        captures=details.struct.json_encode(),
    )  # fmt: skip
    return pl.concat([conform(narrower, FINDINGS), conform(slower, FINDINGS)])


def _gts(speed: pl.Expr) -> pl.Expr:
    """16.0 -> `16`, 2.5 -> `2.5`."""
    return speed.cast(pl.String).str.replace(r"\.0$", "")


def dcgm_findings(dcgm_diag: pl.DataFrame | None, nvlink_status: pl.DataFrame | None) -> pl.DataFrame:
    """DCGM001 per failed `dcgmi diag` test (per GPU where shown), DCGM002 per GPU or NVSwitch with NVLinks Down."""
    return pl.concat([_diag_failures(dcgm_diag), _nvlinks_down(nvlink_status)])


def _diag_failures(dcgm_diag: pl.DataFrame | None) -> pl.DataFrame:
    if dcgm_diag is None or dcgm_diag.is_empty():
        return empty(FINDINGS)
    # A test's own row followed by its GPU rows (DCGM 4): the GPU rows say which GPU failed.
    test, gpu = pl.col("test"), pl.col("gpu")
    summary = (gpu.is_null() & gpu.shift(-1).is_not_null() & (test.shift(-1) == test)).over("file").fill_null(False)
    on_gpu = pl.when(gpu.is_not_null()).then(pl.format(" on GPU {}", gpu)).otherwise(pl.lit(""))
    failed = dcgm_diag.sort("file", "line").filter((pl.col("result") == "Fail") & ~summary)
    found = failed.select(
        "file", "line", "host", "gpu", "text",
        pattern=pl.lit("DCGM001"),
        title=pl.format("DCGM diagnostic {} ({}) failed{}", test, pl.col("section").fill_null("?"), on_gpu),
        category=pl.lit("HARDWARE"), severity=pl.lit("critical"), role=pl.lit("initiating"),
        captures=pl.struct("section", "test", "result", "gpu").struct.json_encode(),
    )  # fmt: skip
    return conform(found, FINDINGS)


def _nvlinks_down(nvlink_status: pl.DataFrame | None) -> pl.DataFrame:
    if nvlink_status is None or nvlink_status.is_empty():
        return empty(FINDINGS)
    is_gpu = pl.col("entity") == "gpu"
    label = pl.when(is_gpu).then(pl.format("GPU {}", "id")).otherwise(pl.format("NVSwitch {}", "id"))
    found = nvlink_status.filter(pl.col("down") > 0).select(
        "file", "line", "host", "text",
        gpu=pl.when(is_gpu).then(pl.col("id")),
        pattern=pl.lit("DCGM002"),
        title=pl.format("NVLink down: {} has {} of {} links Down", label, "down", "links"),
        category=pl.lit("HARDWARE"), severity=pl.lit("critical"), role=pl.lit("initiating"),
        captures=pl.struct("entity", "id", "links", "up", "down", "disabled").struct.json_encode(),
    )  # fmt: skip
    return conform(found, FINDINGS)
