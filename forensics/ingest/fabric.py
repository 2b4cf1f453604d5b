"""What the cluster's own tools printed, read from LINES: nccl-tests runs and InfiniBand port states.

Enters: the LINES frame (nccl-tests and `ibstat` output are text files like any log, found by
content: nothing depends on their names). Leaves:
  nccl_test_devices  one row per `#  Rank  N Group  G Pid  P on HOST device D [BUS] MODEL`
                     line (the older `#   Rank  N [Pid P] on HOST device D [BUS] MODEL` too)
  nccl_test_sizes    one row per line of the result table: size, type, redop, out-of-place
                     and in-place time (us), algbw and busbw (GB/s), wrong values
  nccl_test_runs     one row per run (a `nThread N nGpus G ...` header): ranks, hosts, the
                     largest size measured and its busbw, the `Avg bus bandwidth` and
                     `Out of bounds values` footers, each with its line
  ib_ports           one row per `ibstat` port (`CA 'mlx5_0'` ... `Port 1:`) and per `ibstatus`
                     block (`Infiniband device 'mlx5_0' port 1 status:`): host (its folder's, or
                     the file name's after `ibstat_`/`ibstatus_`), CA, port, State, Physical
                     state, Rate (Gb/s), link layer, and the line of its State. ibstatus's
                     numbered states (`1: DOWN`, `4: ACTIVE`, `5: LinkUp`) take ibstat's words
                     (Down, Active, LinkUp), so both read the same downstream
Assumed: a run's lines are in one file, in order; a table row is a size line of 8 numbers
after its type (and op and root, in nccl-tests from 2.x); its wrong-values column may be an
error magnitude (`2e-07`, older versions), read as no count.
"""

from __future__ import annotations

import re

import polars as pl

from forensics.schema import InputKind, conform, empty

NCCL_TEST_DEVICES = {
    "file": pl.String, "line": pl.Int64, "run": pl.Int32, "rank": pl.Int32, "pid": pl.Int64, "host": pl.String,
    "device": pl.Int32, "bus_id": pl.String, "gpu_model": pl.String,
}  # fmt: skip
NCCL_TEST_SIZES = {
    "file": pl.String, "line": pl.Int64, "run": pl.Int32, "size_bytes": pl.Int64, "type": pl.String, "redop": pl.String,
    "time_us": pl.Float64, "algbw_gbs": pl.Float64, "busbw_gbs": pl.Float64, "wrong": pl.Int64,
    "inplace_time_us": pl.Float64, "inplace_algbw_gbs": pl.Float64, "inplace_busbw_gbs": pl.Float64, "inplace_wrong": pl.Int64,
}  # fmt: skip
NCCL_TEST_RUNS = {
    "file": pl.String, "line": pl.Int64, "run": pl.Int32, "text": pl.String, "ranks": pl.Int32, "hosts": pl.List(pl.String),
    "gpu_model": pl.String, "sizes": pl.Int32, "max_size_bytes": pl.Int64, "max_size_busbw_gbs": pl.Float64,
    "wrong": pl.Int64, "avg_busbw_gbs": pl.Float64, "avg_line": pl.Int64, "out_of_bounds": pl.Int64,
    "out_of_bounds_line": pl.Int64,
}  # fmt: skip
IB_PORTS = {
    "file": pl.String, "line": pl.Int64, "host": pl.String, "ca": pl.String, "ca_type": pl.String, "port": pl.Int32,
    "state": pl.String, "physical_state": pl.String, "rate_gbps": pl.Float64, "link_layer": pl.String, "text": pl.String,
}  # fmt: skip

_FILE_MARK = r"nThread \d+ nGpus|# Avg bus bandwidth|^CA '|^Infiniband device '"
_CANDIDATE = r"nThread \d+ nGpus|#\s+Rank\s+\d+ |(?:^|>:)\s*\d+\s+\d+\s+\w+\s|Avg bus bandwidth|Out of bounds values|^CA '|^\s+(?:Port \d+:|State:|Physical state:|Rate:|Link layer:|CA type:)|^Infiniband device '|^\s+(?:state|phys state|rate|link_layer):"
_PREFIX = r"^(?:\[\d+,\d+\]<std(?:out|err)>:)?"  # mpirun --tag-output
HEADER = _PREFIX + r"#?\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)"
DEVICE = (
    _PREFIX + r"#\s+Rank\s+(?P<rank>\d+)(?: Group\s+\d+)?(?: Pid\s+(?P<pid>\d+))? on\s+(?P<host>\S+) device\s+(?P<device>\d+)"
    r" \[(?P<bus>[0-9a-fA-Fx:.]+)\] (?P<model>.+?)\s*$"
)
_NUM = r"\s+([\d.]+|N/A)"
SIZE_ROW = _PREFIX + r"\s*(\d+)\s+\d+\s+(\w+)(?:\s+(\w+))?(?:\s+-?\d+)?" + _NUM * 3 + r"\s+(\S+)" + _NUM * 3 + r"\s+(\S+)\s*$"
AVG = _PREFIX + r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)"
OUT_OF_BOUNDS = _PREFIX + r"#\s*Out of bounds values\s*:\s*(\d+)"


def sniff_fabric(head: str) -> InputKind | None:
    """nccl-tests or ibstat output, from a file's head; None for anything else."""
    if re.search(HEADER, head, re.M) or re.search(AVG, head, re.M):
        return InputKind.NCCL_TESTS
    if re.search(r"^CA '|^Infiniband device '[^']+' port \d+ status:", head, re.M):
        return InputKind.IBSTAT
    return None


def parse_fabric(lines: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """nccl_test_devices, nccl_test_sizes, nccl_test_runs and ib_ports (see the module docstring)."""
    if lines.is_empty():
        return {**_nccl_tests(lines), "ib_ports": _ib_ports(lines)}
    # One cheap scan finds the files that hold a run header or an ibstat block; only they are read further.
    files = lines.filter(pl.col("text").str.contains(_FILE_MARK))["file"].unique().implode()
    cand = lines.filter(pl.col("file").is_in(files) & pl.col("text").str.contains(_CANDIDATE))
    return {**_nccl_tests(cand), "ib_ports": _ib_ports(cand)}


def _nccl_tests(cand: pl.DataFrame) -> dict[str, pl.DataFrame]:
    names = {"nccl_test_devices": NCCL_TEST_DEVICES, "nccl_test_sizes": NCCL_TEST_SIZES, "nccl_test_runs": NCCL_TEST_RUNS}
    text = pl.col("text")
    marked = cand.filter(text.str.contains(HEADER) | text.str.contains(AVG))["file"].unique().implode()
    rows = cand.filter(pl.col("file").is_in(marked))
    if rows.is_empty():
        return {name: empty(schema) for name, schema in names.items()}
    # Run 0: an excerpt whose header was not kept; every header starts the next run.
    rows = rows.sort("file", "line").with_columns(run=text.str.contains(HEADER).cast(pl.Int32).cum_sum().over("file"))
    dev = text.str.extract_groups(DEVICE)
    devices = rows.filter(text.str.contains(DEVICE)).select(
        "file", "line", "run",
        rank=dev.struct.field("rank").cast(pl.Int32, strict=False), pid=dev.struct.field("pid").cast(pl.Int64, strict=False),
        host=dev.struct.field("host"), device=dev.struct.field("device").cast(pl.Int32, strict=False),
        bus_id=dev.struct.field("bus"), gpu_model=dev.struct.field("model"),
    )  # fmt: skip
    size = text.str.extract_groups(SIZE_ROW)
    fields = ["size_bytes", "type", "redop", "time_us", "algbw_gbs", "busbw_gbs", "wrong",
              "inplace_time_us", "inplace_algbw_gbs", "inplace_busbw_gbs", "inplace_wrong"]  # fmt: skip
    sizes = rows.filter(text.str.contains(SIZE_ROW)).select(
        "file", "line", "run", *(size.struct.field(str(i + 1)).alias(name) for i, name in enumerate(fields))
    )
    numbers = {name: NCCL_TEST_SIZES[name] for name in fields if name not in ("type", "redop")}
    sizes = conform(sizes.with_columns(pl.col(name).cast(dtype, strict=False) for name, dtype in numbers.items()), NCCL_TEST_SIZES)
    return {
        "nccl_test_devices": conform(devices, NCCL_TEST_DEVICES),
        "nccl_test_sizes": sizes,
        "nccl_test_runs": _runs(rows, devices, sizes),
    }


def _runs(rows: pl.DataFrame, devices: pl.DataFrame, sizes: pl.DataFrame) -> pl.DataFrame:
    text = pl.col("text")
    run = ["file", "run"]
    headers = rows.group_by(run, maintain_order=True).agg(
        line=pl.col("line").filter(text.str.contains(HEADER)).first(), text=text.filter(text.str.contains(HEADER)).first()
    )
    footers = rows.group_by(run).agg(
        avg_busbw_gbs=text.str.extract(AVG).cast(pl.Float64, strict=False).drop_nulls().last(),
        avg_line=pl.col("line").filter(text.str.contains(AVG)).last(),
        out_of_bounds=text.str.extract(OUT_OF_BOUNDS).cast(pl.Int64, strict=False).drop_nulls().last(),
        out_of_bounds_line=pl.col("line").filter(text.str.contains(OUT_OF_BOUNDS)).last(),
    )
    who = devices.group_by(run).agg(
        ranks=pl.col("rank").n_unique().cast(pl.Int32), hosts=pl.col("host").unique().sort(), gpu_model=pl.col("gpu_model").mode().first()
    )
    measured = sizes.group_by(run).agg(
        sizes=pl.len().cast(pl.Int32),
        max_size_bytes=pl.col("size_bytes").max(),
        max_size_busbw_gbs=pl.col("busbw_gbs").sort_by("size_bytes").last(),
        wrong=(pl.col("wrong").fill_null(0) + pl.col("inplace_wrong").fill_null(0)).sum(),
    )
    out = headers.join(who, on=run, how="left").join(measured, on=run, how="left").join(footers, on=run, how="left")
    return conform(out.sort(run), NCCL_TEST_RUNS)


def host_of_file(path: pl.Expr, tool: str) -> pl.Expr:
    """The host of a tool's output that prints no host name: `node-b/ibstat.txt` is node-b's, and so
    is `ibstat_node-b.txt` (tool `ibstat`, a regex for the name's part before the host); a bare
    `ibstat.txt` at the top is nobody's (null)."""
    folder = path.str.extract(r"([^/]+)/[^/]+$")
    named = path.str.extract(rf"(?:^|/){tool}[_-]+([\w.-]+?)(?:\.(?:txt|log|out))?$")
    return pl.coalesce(folder, named)


def _ib_ports(cand: pl.DataFrame) -> pl.DataFrame:
    """Every port of the ibstat and ibstatus outputs among the candidate lines."""
    return conform(pl.concat([_ibstat_ports(cand), _ibstatus_ports(cand)]), IB_PORTS)


def _ibstat_ports(cand: pl.DataFrame) -> pl.DataFrame:
    """ibstat's `CA 'mlx5_0'` blocks: each `Port N:` with its State, Physical state, Rate and link layer."""
    text = pl.col("text")
    files = cand.filter(text.str.contains(r"^CA '[^']+'\s*$"))["file"].unique().implode()
    rows = cand.filter(pl.col("file").is_in(files)).sort("file", "line")
    if rows.is_empty():
        return empty(IB_PORTS)
    field = text.str.extract(r"^\s+([A-Za-z ]+):")
    value = text.str.extract(r"^\s+[A-Za-z ]+:\s*(.*?)\s*$")
    keyed = rows.with_columns(
        ca=text.str.extract(r"^CA '([^']+)'").forward_fill().over("file"),
        ca_type=pl.when(field == "CA type").then(value).forward_fill().over("file"),
        port=text.str.extract(r"^\s+Port (\d+):").cast(pl.Int32, strict=False).forward_fill().over("file"),
        field=field,
        value=value,
    ).filter(pl.col("port").is_not_null() & pl.col("field").is_in(["State", "Physical state", "Rate", "Link layer"]))
    ports = keyed.group_by("file", "ca", "port", maintain_order=True).agg(
        pl.coalesce(pl.col("host").drop_nulls().first(), host_of_file(pl.col("file").first(), "ibstat")).alias("host"),
        pl.col("ca_type").drop_nulls().last(),
        line=pl.col("line").filter(pl.col("field") == "State").first(),
        text=pl.col("text").filter(pl.col("field") == "State").first(),
        state=pl.col("value").filter(pl.col("field") == "State").first(),
        physical_state=pl.col("value").filter(pl.col("field") == "Physical state").first(),
        rate_gbps=pl.col("value").filter(pl.col("field") == "Rate").first().cast(pl.Float64, strict=False),
        link_layer=pl.col("value").filter(pl.col("field") == "Link layer").first(),
    )
    return conform(ports.filter(pl.col("state").is_not_null()), IB_PORTS)


IBSTATUS_BLOCK = r"^Infiniband device '([^']+)' port (\d+) status:"
# ibstatus prints the numbered port states of the IB spec; ibstat prints these words for them.
_IBSTATUS_STATES = {"DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed", "ACTIVE": "Active", "ACTIVE_DEFER": "Active"}


def _ibstatus_ports(cand: pl.DataFrame) -> pl.DataFrame:
    """ibstatus's `Infiniband device 'mlx5_0' port 1 status:` blocks: state, phys state, rate and link_layer."""
    text = pl.col("text")
    files = cand.filter(text.str.contains(IBSTATUS_BLOCK))["file"].unique().implode()
    rows = cand.filter(pl.col("file").is_in(files)).sort("file", "line")
    if rows.is_empty():
        return empty(IB_PORTS)
    block = text.str.extract_groups(IBSTATUS_BLOCK)
    field = text.str.extract(r"^\s+([a-z_ ]+?):")
    # `state: 1: DOWN`, `phys state: 5: LinkUp`: the word after the spec's number.
    value = text.str.extract(r"^\s+[a-z_ ]+?:\s*(?:\d+:\s*)?(.*?)\s*$")
    keyed = rows.with_columns(
        ca=block.struct.field("1").forward_fill().over("file"),
        port=block.struct.field("2").cast(pl.Int32, strict=False).forward_fill().over("file"),
        # A line of another tool after the last block ends it: only the block's own fields count.
        field=pl.when(text.str.contains(r"^\s")).then(field),
        value=value,
    ).filter(pl.col("port").is_not_null() & pl.col("field").is_in(["state", "phys state", "rate", "link_layer"]))
    state = pl.col("value").filter(pl.col("field") == "state").first()
    ports = keyed.group_by("file", "ca", "port", maintain_order=True).agg(
        pl.coalesce(pl.col("host").drop_nulls().first(), host_of_file(pl.col("file").first(), "ibstat(?:us)?")).alias("host"),
        line=pl.col("line").filter(pl.col("field") == "state").first(),
        text=pl.col("text").filter(pl.col("field") == "state").first(),
        state=state.replace(_IBSTATUS_STATES),
        physical_state=pl.col("value").filter(pl.col("field") == "phys state").first(),
        rate_gbps=pl.col("value").filter(pl.col("field") == "rate").first().str.extract(r"^([\d.]+)").cast(pl.Float64, strict=False),
        link_layer=pl.col("value").filter(pl.col("field") == "link_layer").first(),
    )
    return conform(ports.filter(pl.col("state").is_not_null()), IB_PORTS)
