"""NCCL debug output (formats.md 1), wherever it sits in LINES, -> frames.

NCCL lines appear in rank logs, console logs and `NCCL_DEBUG_FILE` files alike, behind
any stack of launcher prefixes, so the header `host:pid:tid [dev] ... NCCL LEVEL` is
found anywhere in the line, never anchored at `^`.

`parse_nccl` returns:
  nccl_lines     every NCCL record, split into header fields and message
  nccl_topology  one row per communicator a process joined (Init START/COMPLETE, all
                 generations): rank, nranks, GPU, normalized PCI bus id, comm, commId
  nccl_versions  NCCL and CUDA versions per process
  nccl_transports which transports (NET/IB, P2P/IPC, SHM, NVLS, GDRDMA, ...) a process used
  nccl_interfaces network devices and bootstrap interfaces per process
  nccl_config    what a process was configured with: each `NCCL_X set by environment to V`,
                 the network it chose (`Using network IB`) and its channel counts
                 (`24 coll channels, ... 16 nvls channels, 32 p2p channels, ...`), one row
                 per (process, key) with the line that said it
  nccl_warns     WARN records classified (ib_completion, socket, cuda_failure, ...) and
                 tied to a global rank through the topology (host+pid -> rank)
  nccl_ops       each collective or point-to-point call logged with NCCL_DEBUG_SUBSYS=COLL
                 (`AllReduce: opCount 28c ... comm 0x55be... [nranks=4]`): the process, its
                 global rank, the communicator (its commId where an Init line names it) and
                 the per-communicator operation counter, read from hex
"""

from __future__ import annotations

import polars as pl

from forensics.ingest.timestamps import plausible
from forensics.schema import TIME, conform, empty

NCCL_LINES: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,
    "rank": pl.Int32,  # the line's own rank (prefix / file name)
    "host": pl.String,  # NCCL's short hostname
    "pid": pl.Int64,
    "tid": pl.Int64,
    "cuda_dev": pl.Int32,
    "level": pl.String,  # INFO | WARN | TRACE | CALL
    "src": pl.String,  # WARN/TRACE source location, file:line
    "func": pl.String,  # WARN function (NCCL >= 2.30) or TRACE function
    "msg": pl.String,
    "ts": TIME,  # the WARN timestamp of NCCL >= 2.26 (local time, taken as UTC)
    "time": TIME,  # the LINES time
}

NCCL_TOPOLOGY: dict[str, pl.DataType] = {
    "host": pl.String,
    "pid": pl.Int64,
    "rank": pl.Int32,  # rank inside this communicator
    "nranks": pl.Int32,
    "cuda_dev": pl.Int32,
    "nvml_dev": pl.Int32,
    "bus_id": pl.String,  # as printed (%lx), e.g. 9b000
    "pci_bus_id": pl.String,  # 00000000:9B:00.0
    "comm": pl.String,  # comm pointer
    "comm_id": pl.String,  # commId hash, shared by all members (>= 2.15)
    "phase": pl.String,  # COMPLETE when seen, else START
    "log_rank": pl.Int32,  # rank of the log line that carried it (global)
    "file": pl.String,
    "line": pl.Int64,
}

NCCL_VERSIONS: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,
    "rank": pl.Int32,
    "host": pl.String,
    "pid": pl.Int64,
    "nccl_version": pl.String,
    "cuda_version": pl.String,
}

NCCL_TRANSPORTS: dict[str, pl.DataType] = {
    "host": pl.String,
    "pid": pl.Int64,
    "rank": pl.Int32,
    "transport": pl.String,
    "channels": pl.UInt32,  # how many lines showed it
}

NCCL_INTERFACES: dict[str, pl.DataType] = {
    "host": pl.String,
    "pid": pl.Int64,
    "rank": pl.Int32,
    "kind": pl.String,  # ib | socket | bootstrap | network
    "interface": pl.String,
}

NCCL_CONFIG: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,
    "host": pl.String,
    "pid": pl.Int64,
    "rank": pl.Int32,
    "key": pl.String,  # NCCL_ALGO ... | network | coll channels | nvls channels | p2p channels
    "value": pl.String,
}
NCCL_OPS: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,
    "host": pl.String,
    "pid": pl.Int64,
    "rank": pl.Int32,  # global rank through the topology, else the line's own
    "cuda_dev": pl.Int32,
    "op": pl.String,  # AllReduce, AllGather, Broadcast, Send, Recv, ...
    "op_count": pl.Int64,  # the communicator's operation counter (logged in hex)
    "count": pl.Int64,  # elements
    "datatype": pl.Int32,
    "comm": pl.String,  # the communicator's address in this process
    "comm_id": pl.String,  # the same communicator in every process, where an Init line names it
    "nranks": pl.Int32,
    "time": TIME,
    "text": pl.String,
}
# `AllReduce: opCount 28c sendbuff 0x7f... recvbuff 0x7f... count 9984512 datatype 7 op 0 root 0 comm 0x55be... [nranks=4] stream 0x55be...`
OP_CALL = (
    r"^(?P<op>[A-Z]\w+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ count (?P<count>\d+) "
    r"datatype (?P<dtype>\d+) op \d+ root -?\d+ comm (?P<comm>0x[0-9a-fA-F]+) \[nranks=(?P<nranks>\d+)\]"
)
# The settings NCCL reports once per communicator, as (key, value) regexes over the message.
CONFIG = [
    r"^(?P<key>NCCL_\w+) set by environment to (?P<value>.*?)\s*$",
    r"^Using (?P<key>network) (?P<value>.+?)\s*$",
    r"^(?P<value>\d+) (?P<key>coll channels),",
    r"(?:, |^)(?P<value>\d+) (?P<key>nvls channels),",
    r", (?P<value>\d+) (?P<key>p2p channels),",
]

NCCL_WARNS: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,
    "rank": pl.Int32,  # global rank: topology (host, pid) first, then the line's own rank
    "host": pl.String,
    "pid": pl.Int64,
    "cuda_dev": pl.Int32,
    "time": TIME,  # LINES time, else the NCCL WARN timestamp
    "kind": pl.String,  # see WARN_KINDS
    "ib_status": pl.String,  # 12, or IBV_WC_RETRY_EXC_ERR(12) on the newest NCCL
    "vendor_err": pl.Int64,
    "peer": pl.String,
    "src": pl.String,
    "msg": pl.String,
    "text": pl.String,
}

# The header, found anywhere in the line (formats.md 1.5). Group names avoid LINES columns.
HEADER = (
    r"(?:\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)?\] )?(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) "
    r"(?:\[(?P<dev>\d+)\] )?(?:(?P<trace_ms>\d+\.\d+) (?P<trace_func>\S+):(?P<trace_line>\d+) NCCL TRACE"
    r"|(?P<src>\S+:\d+)(?: \((?P<func>[^)]*)\))? NCCL WARN|NCCL (?P<level>INFO|CALL)) ?(?P<msg>.*)$"
)
_CANDIDATE = r"NCCL (?:INFO|WARN|TRACE|CALL)|NCCL version \d"
VERSION = r"NCCL version (?P<ver>\d+\.\d+\.\d+)[^+\s]*\+cuda(?P<cuda>\d+\.\d+)"
INIT = (
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)(?: commId (?P<cid>0x[0-9a-fA-F]+))?.*? - Init (?P<phase>START|COMPLETE)"
)

# (kind, regex on the WARN message), most specific first (formats.md 1.4, 1.6).
WARN_KINDS: list[tuple[str, str]] = [
    ("ib_completion", r"Got completion from peer"),
    ("ib_async", r"async (?:fatal )?event|GID table changed"),
    ("version_mismatch", r"Mismatched NCCL version|[Vv]ersion mismatch"),
    ("duplicate_gpu", r"Duplicate GPU detected"),
    ("shm", r"/dev/shm|shared memory segment|shm_open|\bshm\b"),
    ("cuda_failure", r"Cuda failure|CUDA error|cuda[A-Z]\w+ failed"),
    ("remote_exited", r"Connection closed by (?:remote peer|localRank)|remote process exited|peer .* closed"),
    ("socket", r"[Ss]ocket|Call to (?:recv|send|connect|accept)|Net : |Bootstrap|connect(?:ion)? (?:to|refused|timed)"),
    ("timeout", r"[Tt]imeout|timed out"),
    ("system_error", r"(?i:failed|error|errno|no such|out of memory)|Call to \w+"),
]


def _normalize_bus_id(bus: pl.Expr) -> pl.Expr:
    """NCCL prints busId as hex of 'DDDD:BB:dd.f' with separators removed: 9b000 -> 00000000:9B:00.0."""
    padded = bus.str.to_uppercase().str.pad_start(13, "0")
    return pl.when(bus.str.len_chars() <= 13).then(
        pl.concat_str(
            padded.str.slice(0, 8),
            pl.lit(":"),
            padded.str.slice(8, 2),
            pl.lit(":"),
            padded.str.slice(10, 2),
            pl.lit("."),
            padded.str.slice(12, 1),
        )  # fmt: skip
    )


def _records(lines: pl.DataFrame) -> pl.DataFrame:
    # An eager literal scan first (a lazy one would be fused with the regex into one
    # predicate over every row): most lines of a big incident hold no "NCCL" at all.
    cand = lines.filter(pl.col("text").str.contains("NCCL", literal=True)).lazy().filter(pl.col("text").str.contains(_CANDIDATE))
    head = pl.col("text").str.extract_groups(HEADER)
    field = head.struct.field
    level = (
        pl.when(field("src").is_not_null()).then(pl.lit("WARN"))
        .when(field("trace_ms").is_not_null()).then(pl.lit("TRACE"))
        .when(field("level").is_not_null()).then(field("level"))
        .otherwise(pl.lit("VERSION"))
    )  # fmt: skip
    out = cand.select(
        "file",
        "line",
        "rank",
        pl.coalesce(field("host").str.split(".").list.first(), "host").alias("host"),
        field("pid").cast(pl.Int64, strict=False).alias("pid"),
        field("tid").cast(pl.Int64, strict=False).alias("tid"),
        field("dev").cast(pl.Int32, strict=False).alias("cuda_dev"),
        level.alias("level"),
        pl.coalesce(field("src"), pl.concat_str(field("trace_func"), pl.lit(":"), field("trace_line"))).alias("src"),
        pl.coalesce(field("func"), field("trace_func")).alias("func"),
        # A bare VERSION record has no header: keep the whole line as the message.
        pl.coalesce(field("msg"), pl.col("text")).alias("msg"),
        plausible(field("ts").str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, time_unit="us", time_zone="UTC")).alias("ts"),
        "time",
        "text",
    )
    return out.collect()


def _topology(rec: pl.DataFrame) -> pl.DataFrame:
    init = pl.col("msg").str.extract_groups(INIT)
    rows = (
        rec.filter(pl.col("msg").str.contains(" - Init ", literal=True))
        .with_columns(init=init)
        .filter(pl.col("init").struct.field("comm").is_not_null())
    )
    f = pl.col("init").struct.field
    topo = rows.select(
        pl.col("host").alias("host"),
        "pid",
        f("rank").cast(pl.Int32).alias("rank"),
        f("nranks").cast(pl.Int32).alias("nranks"),
        f("dev").cast(pl.Int32).alias("cuda_dev"),
        f("nvml").cast(pl.Int32, strict=False).alias("nvml_dev"),
        f("bus").str.to_lowercase().alias("bus_id"),
        _normalize_bus_id(f("bus")).alias("pci_bus_id"),
        f("comm").alias("comm"),
        f("cid").alias("comm_id"),
        f("phase").alias("phase"),
        pl.col("rank").alias("log_rank"),
        "file",
        "line",
    )
    # One row per (host, pid, comm): COMPLETE wins over START (a hang during init leaves START only).
    return conform(
        topo.sort(pl.col("phase") == "COMPLETE", "line", descending=[True, False])
        .unique(["host", "pid", "comm", "rank"], keep="first", maintain_order=True)
        .sort("host", "pid", "nranks", "rank", descending=[False, False, True, False]),
        NCCL_TOPOLOGY,
    )


def process_ranks(topology: pl.DataFrame) -> pl.DataFrame:
    """(host, pid) -> global rank: the process's rank in its largest communicator.

    The largest communicator is the default group (all ranks); sub-groups and splits
    give the same process smaller, different ranks.
    """
    if topology.is_empty():
        return pl.DataFrame(
            schema={
                "host": pl.String,
                "pid": pl.Int64,
                "global_rank": pl.Int32,
                "world": pl.Int32,
                "cuda_dev": pl.Int32,
                "pci_bus_id": pl.String,
            }  # fmt: skip
        )
    return (
        topology.sort("nranks", "line", descending=[True, False])
        .group_by("host", "pid", maintain_order=True)
        .first()
        .select("host", "pid", pl.col("rank").alias("global_rank"), pl.col("nranks").alias("world"), "cuda_dev", "pci_bus_id")
    )


def _versions(rec: pl.DataFrame) -> pl.DataFrame:
    ver = pl.col("msg").str.extract_groups(VERSION)
    rows = rec.filter(pl.col("msg").str.contains("NCCL version ", literal=True)).with_columns(v=ver)
    out = rows.select(
        "file", "line", "rank", pl.col("host").alias("host"), "pid",
        pl.col("v").struct.field("ver").alias("nccl_version"), pl.col("v").struct.field("cuda").alias("cuda_version"),
    ).filter(pl.col("nccl_version").is_not_null())  # fmt: skip
    return conform(out, NCCL_VERSIONS)


def _transports(rec: pl.DataFrame) -> pl.DataFrame:
    info = rec.filter(pl.col("level") == "INFO")
    msg = pl.col("msg")
    via = msg.str.extract(r" via (P2P/IPC|P2P/CUMEM|P2P/direct|NET/[A-Za-z]+|SHM|CollNet)")
    gdr = pl.when(msg.str.contains(r" via NET/\S*/GDRDMA")).then(pl.lit("GDRDMA"))
    nvls = pl.when(msg.str.contains(r"Connected NVLS|[1-9]\d* nvls channels")).then(pl.lit("NVLS"))
    network = msg.str.extract(r"Using network (\S+)")
    found = info.select(
        pl.col("host").alias("host"), "pid", "rank",
        pl.concat_list(via, gdr, nvls, pl.concat_str(pl.lit("NET/"), network)).alias("transport"),
    ).explode("transport").filter(pl.col("transport").is_not_null())  # fmt: skip
    out = found.group_by("host", "pid", "transport").agg(pl.col("rank").drop_nulls().first(), pl.len().alias("channels"))
    return conform(out.sort("host", "pid", "transport"), NCCL_TRANSPORTS)


def _interfaces(rec: pl.DataFrame) -> pl.DataFrame:
    msg = pl.col("msg")
    using = rec.filter(pl.col("level") == "INFO").with_columns(
        ib=pl.when(msg.str.contains(r"NET/IB ?: Using")).then(msg.str.extract_all(r"\[\d+\]([\w.-]+:\d+/(?:IB|RoCE))")),
        sock=pl.when(msg.str.contains(r"NET/Socket ?: Using")).then(msg.str.extract_all(r"\[\d+\]([\w.-]+:[\w.:]+)<")),
        boot=pl.concat_list(msg.str.extract(r"Bootstrap ?: Using \[?\d*\]?([\w.-]+:[\w.:]+)<"), msg.str.extract(r"OOB ([\w.-]+:[\w.:]+)<")),
    )
    parts = []
    for kind, col in (("ib", "ib"), ("socket", "sock"), ("bootstrap", "boot")):
        part = using.select(
            pl.col("host").alias("host"), "pid", "rank", pl.lit(kind).alias("kind"),
            pl.col(col).alias("interface"),
        ).explode("interface")  # fmt: skip
        parts.append(part.with_columns(pl.col("interface").str.replace(r"^\[\d+\]", "").str.replace(r"<\d+>$", "")))
    out = pl.concat(parts).filter(pl.col("interface").is_not_null()).unique(maintain_order=True)
    return conform(out, NCCL_INTERFACES)


def _config(rec: pl.DataFrame) -> pl.DataFrame:
    """NCCL_CONFIG rows: one per (process, key), its last value (a later communicator may change it)."""
    info = rec.filter((pl.col("level") == "INFO") & pl.col("msg").str.contains("set by environment|Using network|coll channels"))
    parts = [
        info.with_columns(kv=pl.col("msg").str.extract_groups(pattern))
        .filter(pl.col("kv").struct.field("key").is_not_null())
        .select("file", "line", "host", "pid", "rank", key=pl.col("kv").struct.field("key"), value=pl.col("kv").struct.field("value"))
        for pattern in CONFIG
    ]
    found = pl.concat(parts).sort("file", "line").unique(["host", "pid", "key"], keep="last", maintain_order=True)
    return conform(found, NCCL_CONFIG)


def _warn_kind(msg: pl.Expr) -> pl.Expr:
    expr = pl.lit("other")
    for kind, pattern in reversed(WARN_KINDS):
        expr = pl.when(msg.str.contains(pattern)).then(pl.lit(kind)).otherwise(expr)
    return expr


def _warns(rec: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    warns = rec.filter(pl.col("level") == "WARN")
    if warns.is_empty():
        return empty(NCCL_WARNS)
    msg = pl.col("msg")
    out = (
        warns.join(ranks.select("host", "pid", "global_rank"), on=["host", "pid"], how="left").select(
            "file",
            "line",
            pl.coalesce("global_rank", "rank").alias("rank"),
            pl.col("host").alias("host"),
            "pid",
            "cuda_dev",
            pl.coalesce("time", "ts").alias("time"),
            _warn_kind(msg).alias("kind"),
            pl.coalesce(msg.str.extract(r"status=(\w+\(\d+\)|\d+)"), msg.str.extract(r"with error (\d+)")).alias("ib_status"),
            msg.str.extract(r"vendor[ _]err[ =](\d+)").cast(pl.Int64, strict=False).alias("vendor_err"),
            msg.str.extract(r"(?:from peer|by remote peer|recv from|send to) (\S+?)(?:<\d+>)?(?: |$|,)").alias("peer"),
            "src",
            "msg",
            "text",
        )  # fmt: skip
    )
    return conform(out, NCCL_WARNS)


def _ops(rec: pl.DataFrame, topology: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """NCCL_OPS rows: the COLL subsystem's one line per call."""
    calls = rec.filter((pl.col("level") == "INFO") & pl.col("msg").str.contains(": opCount ", literal=True))
    if calls.is_empty():
        return empty(NCCL_OPS)
    f = pl.col("call").struct.field
    parsed = calls.with_columns(call=pl.col("msg").str.extract_groups(OP_CALL)).filter(f("op").is_not_null())
    comm_ids = topology.filter(pl.col("comm_id").is_not_null()).select("host", "pid", "comm", "comm_id").unique(["host", "pid", "comm"])
    out = (
        parsed.with_columns(
            op=f("op"),
            op_count=f("opcount").str.to_integer(base=16, strict=False),
            count=f("count").cast(pl.Int64, strict=False),
            datatype=f("dtype").cast(pl.Int32, strict=False),
            comm=f("comm"),
            nranks=f("nranks").cast(pl.Int32, strict=False),
        )
        .join(comm_ids, on=["host", "pid", "comm"], how="left")
        .join(ranks.select("host", "pid", "global_rank"), on=["host", "pid"], how="left")
        .with_columns(rank=pl.coalesce("global_rank", "rank"), time=pl.coalesce("time", "ts"))
    )
    return conform(out, NCCL_OPS)


def parse_nccl(lines: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """All NCCL frames from a LINES frame (see the module docstring for what each holds)."""
    names = {
        "nccl_lines": NCCL_LINES, "nccl_topology": NCCL_TOPOLOGY, "nccl_versions": NCCL_VERSIONS,
        "nccl_transports": NCCL_TRANSPORTS, "nccl_interfaces": NCCL_INTERFACES, "nccl_warns": NCCL_WARNS,
        "nccl_config": NCCL_CONFIG, "nccl_ops": NCCL_OPS,
    }  # fmt: skip
    if lines.is_empty():
        return {name: empty(schema) for name, schema in names.items()}
    rec = _records(lines)
    topology = _topology(rec)
    ranks = process_ranks(topology)
    # The rank recorded on each process's own lines fills in for processes without Init lines.
    rec = rec.with_columns(rank=pl.col("rank").fill_null(pl.col("rank").drop_nulls().first().over(["host", "pid"])))
    return {
        "nccl_lines": conform(rec, NCCL_LINES),
        "nccl_topology": topology,
        "nccl_versions": _versions(rec),
        "nccl_transports": _transports(rec),
        "nccl_interfaces": _interfaces(rec),
        "nccl_warns": _warns(rec, ranks),
        "nccl_config": _config(rec),
        "nccl_ops": _ops(rec, topology, ranks),
    }
