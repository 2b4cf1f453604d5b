"""c10d / ProcessGroupNCCL watchdog messages and torchrun exit records, from LINES.

`parse_collectives` turns watchdog, desync-debug, heartbeat, dump-signal, blocking-wait
and gloo messages of torch 1.13 -> 2.x (formats.md 2) into one row per event with the
process group, sequence numbers and work description normalized across versions.
`parse_exits` reads torchrun's ChildFailedError table and the elastic agent's
`failed (exitcode: N)` lines (formats.md 4) into one row per failed worker.

Both filter by rare literals first and then run short extractions over the few
candidate rows; nothing loops over lines in Python. They read; they do not judge.
"""

from __future__ import annotations

import re

import polars as pl

from forensics.ingest.timestamps import plausible
from forensics.schema import MAX_RANKS, TIME, conform, empty

COLLECTIVES: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,
    "rank": pl.Int32,  # global rank (line prefix / file name)
    "host": pl.String,
    "time": TIME,
    "kind": pl.String,  # see KINDS
    "pg_guid": pl.String,  # PG GUID (>= 2.5), PG name/uid (<= 2.4); null when the line names none
    "pg_desc": pl.String,
    "pg_id": pl.Int64,  # per-process PG counter (>= 2.5 only)
    "pg_rank": pl.Int32,  # rank inside that PG
    "seq": pl.Int64,  # SeqNum / work sequence id / desync collective #
    "op_type": pl.String,
    "numel_in": pl.Int64,
    "numel_out": pl.Int64,
    "timeout_ms": pl.Int64,
    "ran_for_ms": pl.Int64,
    "last_enqueued": pl.Int64,
    "last_completed": pl.Int64,
    "ranks_named": pl.List(pl.Int32),  # desync report rank lists, remote-error / dump source rank
    "detail": pl.String,  # desync sub-kind, error reason, stuck seconds, ...
    "text": pl.String,
}

KINDS = (
    "watchdog_timeout", "failure_detected", "last_work_status", "heartbeat_stuck", "desync_report",
    "blocking_wait_timeout", "dump_signal", "gloo_timeout", "watchdog_terminated", "remote_error",
    "nccl_error", "terminating", "stall_report", "unique_id_wait",
)  # fmt: skip

EXITS: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,
    "source": pl.String,  # "table" (ChildFailedError) | "agent" (failed (exitcode: N) line)
    "rank": pl.Int32,  # global rank (table only)
    "local_rank": pl.Int32,
    "host": pl.String,
    "exitcode": pl.Int32,
    "pid": pl.Int64,
    "signal": pl.String,  # SIGABRT, ... for negative exit codes
    "time": TIME,
    "root_cause": pl.Boolean,  # listed under "Root Cause (first observed failure)": first *noticed*
    "error_file": pl.String,
    "traceback": pl.String,  # first line of the table's traceback value
}

# Rare literals, one escaped alternation: the only full-column scan.
_CANDIDATE_LITERALS = [
    "atchdog",  # Watchdog caught / by watchdog at work / watchdog got stuck / watchdog thread terminated
    "Timeout at ", "Heartbeat monitor", "blocking wait", "dump signal", "gloo", "remote error detected",
    "async exception", "NCCL error in:", "Terminating the process",
    "lagging", "didn't", "ranks:", "] started ", "] finished ",  # desync report lines
    "[missing ranks: ", "[ready ranks: ",  # Horovod's stall report, before 0.21 (and before 0.16)
    "ncclUniqueId from [",  # a rank that gave up waiting for another's NCCL unique id
]  # fmt: skip
_CANDIDATE = "|".join(re.escape(literal) for literal in _CANDIDATE_LITERALS)
_WORK = (
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>-?\d+), NumelOut=(?P<nout>-?\d+))?"
    r", Timeout\(ms\)=(?P<timeout>\d+)\)(?: ran for (?P<ran>\d+) milliseconds)?"
)
_PG = (
    r"\[PG (?:ID (?P<pgid>\d+) PG GUID (?P<guid>[^\s(\]]+)(?:\((?P<desc>[^)]*)\))?"
    r"|(?P<old>[^\s\]]+)(?: \((?P<desc2>[^)]*)\))?) Rank (?P<prank>\d+)\]"
)
_PROGRESS = (
    r"(?:at work(?: sequence id)?|Timeout at NCCL work): (?P<seq>\d+)[,.]? (?:PG status: )?"
    r"last enqueued (?:NCCL )?work: (?P<enq>-?\d+), last completed (?:NCCL )?work: (?P<done>-?\d+)"
)
_DUMP_PROGRESS = r"Last enqueued NCCL work: (?P<enq>-?\d+), last completed NCCL work: (?P<done>-?\d+)"
_RANK_LIST = r"\[((?:\d+, )*\d+)\]"


def _kind(text: pl.Expr) -> pl.Expr:
    """First matching kind, most specific first (a terminated line also quotes the timeout)."""
    rules = [
        ("watchdog_terminated", r"watchdog thread terminated with exception"),
        ("terminating", r"Terminating the process after attempting to dump"),
        ("blocking_wait_timeout", r"timed out in blocking wait"),
        ("watchdog_timeout", r"Watchdog caught collective operation timeout"),
        ("failure_detected", r"detected by watchdog at work"),
        ("last_work_status", r"Timeout at NCCL work: \d+"),
        ("heartbeat_stuck", r"watchdog got stuck for|Heartbeat monitor timed out"),
        ("dump_signal", r"Received a dump signal|flight recorder dump signal from another rank"),
        ("stall_report", r"\[(?:missing|ready) ranks: \d"),
        ("unique_id_wait", r"retr(?:ie|ei)ving ncclUniqueId from \[\d+\]"),  # older PyTorch spells it `retreiving`
        (
            "desync_report",
            r"Timeout at collective: |lagging ranks|joined but didn't finish|didn't join collective|started ranks:|finished ranks:|\] (?:started|finished) \w+\s*$",
        ),
        ("gloo_timeout", r"(?i:gloo).*Timed out waiting \d+ ?ms"),
        ("remote_error", r"remote error detected from rank"),
        ("nccl_error", r"raised the following async exception|NCCL error in:"),
    ]
    expr = pl.lit(None, pl.String)
    for kind, pattern in reversed(rules):
        expr = pl.when(text.str.contains(pattern)).then(pl.lit(kind)).otherwise(expr)
    return expr


def _plausible(ranks: pl.Expr) -> pl.Expr:
    """Rank lists without numbers no job has (MAX_RANKS and above)."""
    return ranks.list.filter(pl.element() < MAX_RANKS)


def _ints(text: pl.Expr, pattern: str) -> pl.Expr:
    """'[1, 5, 7]' captured by `pattern` -> [1, 5, 7]."""
    return text.str.extract(pattern).str.split(", ").cast(pl.List(pl.Int32), strict=False)


def _not_ready(text: pl.Expr) -> pl.Expr:
    """Old Horovod's `tensor [ready ranks: 0, 7, 3]` -> the ranks below the highest ready one that
    are not ready ([1, 2, 4, 5, 6]); a missing rank above every ready one cannot be told."""
    ready = _plausible(_ints(text, r"\[ready ranks: ((?:\d+, )*\d+)\]"))
    return pl.int_ranges(0, ready.list.max() + 1, dtype=pl.Int32).list.set_difference(ready).list.sort()


def parse_collectives(lines: pl.DataFrame) -> pl.DataFrame:
    """One row per c10d watchdog/collective event (COLLECTIVES), deduplicated.

    The watchdog logs one timeout up to three times per rank (the ERROR line, inside
    "watchdog thread terminated", inside `what():`): rows are unique per
    (kind, rank, pg, seq). A `Watchdog caught` line names only `[Rank r]`; it takes its
    PG from the `failure detected` line of the same rank and seq.
    """
    if lines.is_empty():
        return empty(COLLECTIVES)
    text = pl.col("text")
    cand = lines.lazy().filter(text.str.contains(_CANDIDATE)).with_columns(kind=_kind(text)).filter(pl.col("kind").is_not_null())
    # Desync-report continuation lines carry no rank prefix: inherit the block's rank.
    cand = cand.with_columns(
        rank=pl.coalesce(
            text.str.extract(r"\[rank(\d+)\]:").cast(pl.Int32, strict=False),
            "rank",
            text.str.extract(r"\[(\d+)\] is setting up NCCL communicator").cast(pl.Int32, strict=False),
            pl.col("rank").drop_nulls().first().over(["file", "block"]),
        )
    )
    work = text.str.extract_groups(_WORK)
    pg = text.str.extract_groups(_PG)
    progress = text.str.extract_groups(_PROGRESS)
    dump = text.str.extract_groups(_DUMP_PROGRESS)
    desync_seq = pl.coalesce(
        text.str.extract(r"Timeout at collective: \w+, #(\d+)"),
        text.str.extract(r"joined but didn't finish collective #(\d+)"),
        text.str.extract(r"finished collective #\d+, but didn't join collective #(\d+)"),
        text.str.extract(r"#(\d+) (?:started|finished) ranks:"),
    )
    desync_detail = (
        pl.when(text.str.contains("are the lagging ranks")).then(pl.lit("never_joined"))
        .when(text.str.contains("joined but didn't finish")).then(pl.lit("joined_not_finished"))
        .when(text.str.contains("didn't join collective")).then(pl.lit("finished_not_joined"))
        .when(text.str.contains(r"\] started \w+")).then(pl.lit("started"))
        .when(text.str.contains(r"\] finished \w+")).then(pl.lit("finished"))
        .when(text.str.contains("Timeout at collective")).then(pl.lit("timeout_at"))
    )  # fmt: skip
    named = pl.coalesce(
        _ints(text, r"ranks " + _RANK_LIST + r" are the lagging ranks"),
        _ints(text, r"\[missing ranks: ((?:\d+, )*\d+)\]"),
        _not_ready(text),
        _ints(text, _RANK_LIST + r" (?:joined but didn't finish|finished collective|started|finished) "),
        _ints(
            text, r"(?:remote error detected from rank:? ?|dump signal due to a collective timeout from +rank |ncclUniqueId from \[)(\d+)"
        ),
    )
    detail = (
        pl.when(pl.col("kind") == "desync_report").then(desync_detail)
        .when(pl.col("kind") == "stall_report").then(pl.lit("never_joined"))
        .when(pl.col("kind") == "heartbeat_stuck").then(text.str.extract(r"got stuck for (\d+ seconds)"))
        .when(pl.col("kind") == "dump_signal").then(text.str.extract(r"from (this local rank|another rank| +rank -?\d+)").str.strip_chars())
        .when(pl.col("kind") == "nccl_error").then(
            pl.coalesce(text.str.extract(r"NCCL error: ([^,]+)"), text.str.extract(r"NCCL error in: \S+?:\d+, (.+?), NCCL version"))
        )
        .when(pl.col("kind") == "gloo_timeout").then(text.str.extract(r"for (\w+) operation"))
        .when(pl.col("kind") == "terminating").then(text.str.extract(r"due to (.+?)\.?\s*$"))
    )  # fmt: skip
    out = cand.with_columns(
        pg_guid=pl.coalesce(pg.struct.field("guid"), pg.struct.field("old")),
        pg_desc=pl.coalesce(pg.struct.field("desc"), pg.struct.field("desc2")),
        pg_id=pg.struct.field("pgid").cast(pl.Int64, strict=False),
        pg_rank=pl.coalesce(pg.struct.field("prank"), text.str.extract(r"\[Rank (\d+)\]")).cast(pl.Int32, strict=False),
        seq=pl.coalesce(
            pl.when(pl.col("kind") == "desync_report").then(desync_seq),
            work.struct.field("seq"),
            progress.struct.field("seq"),
        ).cast(pl.Int64, strict=False),
        op_type=pl.coalesce(
            work.struct.field("op"),
            text.str.extract(r"Timeout at collective: (\w+)"),
            text.str.extract(r"(\S+) \[(?:missing|ready) ranks: "),
            text.str.extract(r"\] (?:started|finished) (\w+)\s*$"),
        ),
        numel_in=work.struct.field("nin").cast(pl.Int64, strict=False),
        numel_out=work.struct.field("nout").cast(pl.Int64, strict=False),
        timeout_ms=pl.coalesce(work.struct.field("timeout"), text.str.extract(r"Timed out waiting (\d+) ?ms")).cast(pl.Int64, strict=False),
        ran_for_ms=work.struct.field("ran").cast(pl.Int64, strict=False),
        last_enqueued=pl.coalesce(progress.struct.field("enq"), dump.struct.field("enq")).cast(pl.Int64, strict=False),
        last_completed=pl.coalesce(progress.struct.field("done"), dump.struct.field("done")).cast(pl.Int64, strict=False),
        ranks_named=_plausible(named),
        detail=detail,
    )
    # Snapshot lines (`[0, 2] started ALLREDUCE`) take the seq of the `#N started ranks:` header above.
    out = out.with_columns(
        seq=pl.when(pl.col("kind") == "desync_report")
        .then(pl.col("seq").forward_fill().over(["file", "block"], order_by="line"))
        .otherwise(pl.col("seq"))
    ).filter((pl.col("kind") != "desync_report") | pl.col("detail").is_not_null())
    # `Watchdog caught` names no PG: borrow it from this rank's other lines about the same seq.
    same_work = [pl.col("rank").fill_null(-1), "seq"]
    out = out.with_columns(
        pg_guid=pl.col("pg_guid").fill_null(pl.col("pg_guid").drop_nulls().first().over(same_work)),
        pg_desc=pl.col("pg_desc").fill_null(pl.col("pg_desc").drop_nulls().first().over(same_work)),
    )
    frame = pl.concat([conform(out.sort("file", "line").collect(), COLLECTIVES), _horovod_missing_ranks(lines)]).sort("file", "line")
    dedupe_key = ["kind", "rank", "pg_guid", "seq"]
    repeated = pl.col("kind").is_in(["watchdog_timeout", "watchdog_terminated", "blocking_wait_timeout"])
    return pl.concat([frame.filter(repeated).unique(dedupe_key, keep="first", maintain_order=True), frame.filter(~repeated)]).sort(
        "file", "line"
    )


_HOROVOD_HEADER = r"Missing ranks:\s*$"
_HOROVOD_ROW = r"^(?:\[\d+\](?:<\w+>:)?\s*)?(?P<rank>\d+): \[(?P<tensor>[^,\]\s]+)"
_HOROVOD_MAX_ROWS = 1024  # rows of one report: one per missing rank


def _horovod_missing_ranks(lines: pl.DataFrame) -> pl.DataFrame:
    """Horovod >= 0.21's stall report (kind stall_report): a `Missing ranks:` header, then one
    `R: [tensor, ...]` line per rank that never submitted those tensors."""
    text = pl.col("text")
    if not lines["text"].str.contains(_HOROVOD_HEADER).any():
        return empty(COLLECTIVES)
    row = text.str.extract_groups(_HOROVOD_ROW)
    found = (
        lines.sort("file", "line")
        .with_columns(_header=pl.when(text.str.contains(_HOROVOD_HEADER)).then(pl.col("line")).forward_fill().over("file"))
        .filter((pl.col("line") - pl.col("_header")).is_between(1, _HOROVOD_MAX_ROWS) & text.str.contains(_HOROVOD_ROW))
        .with_columns(
            kind=pl.lit("stall_report"),
            detail=pl.lit("never_joined"),
            ranks_named=_plausible(pl.concat_list(row.struct.field("rank").cast(pl.Int32, strict=False))),
            op_type=row.struct.field("tensor"),
        )
    )
    return conform(found, COLLECTIVES)


_TABLE_KEY = r"^(?:.*?\s)?\s(?P<key>time|host|rank|exitcode|error_file|traceback)\s*: ?(?P<val>.*)$"
_TABLE_INDEX = r"\[(\d+)\]:\s*$"
_TABLE_LITERALS = "|".join(
    re.escape(literal)
    for literal in ("time      : ", "host      : ", "rank      : ", "exitcode  : ", "error_file: ", "traceback : ",
                    "Root Cause (first observed failure):", "Failures:", "=" * 20, "failed (exitcode: ")
)  # fmt: skip
_AGENT = r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) \(pid: (?P<pid>\d+)\)"
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
            11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}  # fmt: skip


def _signal(exitcode: pl.Expr) -> pl.Expr:
    return pl.when(exitcode < 0).then((-exitcode).replace_strict(_SIGNALS, default=None, return_dtype=pl.String))


def _table_exits(lines: pl.LazyFrame) -> pl.LazyFrame:
    """ChildFailedError records: `[idx]:` then key rows; the section header says root or other."""
    text = pl.col("text")
    marks = lines.filter(
        text.str.contains(
            _TABLE_INDEX + r"|\s(?:time|host|rank|exitcode|error_file|traceback)\s*: "
            r"|Root Cause \(first observed failure\):|Failures:\s*$|={20,}\s*$"
        )
    )
    marks = marks.with_columns(
        idx=text.str.extract(_TABLE_INDEX),
        section=pl.when(text.str.contains("Root Cause (first observed failure):", literal=True)).then(pl.lit("root"))
        .when(text.str.contains(r"(?:^|\s)Failures:\s*$")).then(pl.lit("other"))
        .when(text.str.contains(r"(?:^|[\s:])={20,}\s*$")).then(pl.lit("end")),
        key=text.str.extract_groups(_TABLE_KEY),
    )  # fmt: skip
    in_file = ["file"]
    marks = marks.with_columns(
        record=pl.when(pl.col("idx").is_not_null()).then(pl.col("line")).forward_fill().over(in_file, order_by="line"),
        section=pl.col("section").forward_fill().over(in_file, order_by="line"),
        k=pl.col("key").struct.field("key"),
        v=pl.col("key").struct.field("val"),
    ).filter(
        pl.col("k").is_not_null() & pl.col("record").is_not_null() & (pl.col("line") - pl.col("record") <= 6)
        & pl.col("section").is_in(["root", "other"])
    )  # fmt: skip

    def field(name: str) -> pl.Expr:
        return pl.col("v").filter(pl.col("k") == name).first().str.strip_chars().alias(name)

    records = marks.group_by("file", "record").agg(
        field("time"), field("host"), field("rank"), field("exitcode"), field("error_file"), field("traceback"),
        (pl.col("section").first() == "root").alias("root_cause"),
    )  # fmt: skip
    code = pl.col("exitcode").str.extract(r"^(-?\d+)").cast(pl.Int32, strict=False)
    return records.select(
        "file",
        pl.col("record").alias("line"),
        pl.lit("table").alias("source"),
        pl.col("rank").str.extract(r"^(\d+)").cast(pl.Int32, strict=False).alias("rank"),
        pl.col("rank").str.extract(r"local_rank: (\d+)").cast(pl.Int32, strict=False).alias("local_rank"),
        pl.col("host").str.split(".").list.first().alias("host"),
        code.alias("exitcode"),
        pl.col("exitcode").str.extract(r"pid: (\d+)").cast(pl.Int64, strict=False).alias("pid"),
        pl.coalesce(pl.col("traceback").str.extract(r"Signal \d+ \((SIG\w+)\)"), _signal(code)).alias("signal"),
        plausible(pl.col("time").str.to_datetime("%Y-%m-%d_%H:%M:%S", strict=False, time_unit="us", time_zone="UTC")).alias("time"),
        "root_cause",
        pl.when(pl.col("error_file") != "<N/A>").then(pl.col("error_file")).alias("error_file"),
        "traceback",
    )


def _agent_exits(lines: pl.LazyFrame) -> pl.LazyFrame:
    agent = pl.col("text").str.extract_groups(_AGENT)
    code = agent.struct.field("code").cast(pl.Int32, strict=False)
    return lines.filter(pl.col("text").str.contains("failed (exitcode: ", literal=True)).select(
        "file",
        "line",
        pl.lit("agent").alias("source"),
        pl.lit(None, pl.Int32).alias("rank"),
        agent.struct.field("lr").cast(pl.Int32, strict=False).alias("local_rank"),
        "host",
        code.alias("exitcode"),
        agent.struct.field("pid").cast(pl.Int64, strict=False).alias("pid"),
        _signal(code).alias("signal"),
        "time",
        pl.lit(None, pl.Boolean).alias("root_cause"),
        pl.lit(None, pl.String).alias("error_file"),
        pl.lit(None, pl.String).alias("traceback"),
    )


def parse_exits(lines: pl.DataFrame) -> pl.DataFrame:
    """Failed workers from torchrun's ChildFailedError tables and agent lines (EXITS).

    The table's "Root Cause" is only the failure the agent noticed first on that node;
    each node prints its own table, so compare `time` across tables to find the first.
    """
    if lines.is_empty():
        return empty(EXITS)
    # Eager literal prefilter: the table's regexes then run on a few rows, not on every line.
    text = pl.col("text")
    candidates = lines.filter(text.str.ends_with("]:") | text.str.contains(_TABLE_LITERALS)).lazy()
    frames = [conform(f, EXITS) for f in pl.collect_all([_table_exits(candidates), _agent_exits(candidates)])]
    return pl.concat(frames).filter(pl.col("exitcode").is_not_null()).sort("file", "line")
