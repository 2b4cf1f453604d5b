"""Find the rank the others were waiting for in a hung or timed-out collective.

When a collective hangs, every rank that reached it times out and logs loudly; the rank
that caused it is usually the quiet one. This pass compares what each rank says about
each process group and names the ranks that differ from the crowd.

Notes:
    Evidence, strongest first (each becomes findings for the ranks it names):
    - HANG001 lagging: within one PG GUID (sequence numbers are per PG), the ranks whose
      last completed work is lowest while others got further; when all completed the
      same work, the ranks whose last enqueued work is lowest (they never called the
      collective the others are stuck in).
    - HANG002 silent: a strict majority of the ranks that left logs timed out, and some
      did not. A rank with no timeout had no pending collective: it never got there.
    - HANG004 named by the desync report (TORCH_NCCL_DESYNC_DEBUG), in PG ranks.
    - HANG005 Flight Recorder: like torchfrtrace, entries are matched across ranks by
      (pg, collective_seq_id); a rank that never recorded collective N while others did
      is missing from it.
    - DESYNC001 mismatch: the same (pg, seq) with a different op type, element count,
      shape or dtype on some ranks (watchdog lines, desync snapshot, FR entries).
    - NCCLNET001 network: an NCCL transport WARN (IB completion error, async event,
      socket failure) before or during the timeouts names the rank whose link failed.
    - HANG008 unique id: a rank gave up fetching the NCCL unique id that another rank
      publishes in the c10d store when a communicator is set up; the rank it names never
      published it (still busy before its first collective, or dead).
    - HANG003 first exit: the worker torchrun saw fail first, when one is strictly
      first and did not die of the watchdog's own abort (SIGABRT). A weak signal: the
      table's "root cause" is only the first failure the agent *noticed*.
    Thresholds: "silent" needs the crowd to be more than half of the ranks with logs and
    at least two ranks (when a crash makes torchrun kill a node's workers, half the job
    goes quiet without being the cause); ranks without any log are blamed only when
    every rank with a log timed out and they are few (at most one in eight).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import polars as pl

from forensics.incident import PassResult
from forensics.ingest.c10d import COLLECTIVES
from forensics.ingest.nccl import process_ranks
from forensics.passes.flight_recorder import DEFAULT_PG, flight_recorder_mismatches
from forensics.passes.rank_ranges import parse_ranges, rank_ranges
from forensics.schema import FINDINGS, Category, Role, Severity, conform, empty

TIMEOUT_KINDS = ["watchdog_timeout", "blocking_wait_timeout", "watchdog_terminated", "last_work_status", "gloo_timeout"]
PROGRESS_KINDS = ["failure_detected", "last_work_status", "dump_signal"]
NETWORK_WARNS = ["ib_completion", "ib_async", "socket"]  # remote_exited is a cascade
_TABLE_ROW = r"^\s*\[\d+\]:\s*$|^\s+(?:time|host|rank|exitcode|error_file|traceback)\s*: "

COLLECTIVE_RANKS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "host": pl.String,
    "pg": pl.String,
    "last_enqueued": pl.Int64,
    "last_completed": pl.Int64,
    "timed_out_seq": pl.Int64,
    "op_type": pl.String,
    "state": pl.String,  # timed_out | pending | idle | silent | no_log | culprit:<patterns joined by '+'>
}

COLLECTIVE_STATE: dict[str, pl.DataType] = {
    "ranks": pl.String,  # "0-511, 513-1023"
    "n_ranks": pl.UInt32,
    "pg": pl.String,
    "last_enqueued": pl.Int64,
    "last_completed": pl.Int64,
    "timed_out_seq": pl.Int64,
    "op_type": pl.String,
    "state": pl.String,
}


def _reporter(rank: int | None) -> str:
    return "an untagged line" if rank is None else f"from rank {rank}"


def _waiter(rank: int | None) -> str:
    return "a rank" if rank is None else f"rank {rank}"


def _finding(pattern: str, title: str, category: str, severity: str, role: str, rank: int | None,
             host: str | None, evidence: dict | None, text: str, captures: dict, gpu: dict | None = None) -> dict:  # fmt: skip
    evidence = evidence or {}
    gpu = gpu or {}
    return {
        "pattern": pattern, "title": title, "category": category, "severity": severity, "role": role,
        "file": evidence.get("file"), "line": evidence.get("line"), "rank": rank, "host": host,
        "time": evidence.get("time"), "text": text, "gpu": gpu.get("cuda_dev"), "pci_bus_id": gpu.get("pci_bus_id"),
        "captures": json.dumps({**captures, "evidence": evidence.get("text")}, sort_keys=True, default=str),
    }  # fmt: skip


def _is_timeout() -> pl.Expr:
    """A timeout row; a terminated watchdog counts only when it quotes a timed-out work (not a CUDA error)."""
    return pl.col("kind").is_in(TIMEOUT_KINDS) & ((pl.col("kind") != "watchdog_terminated") | pl.col("seq").is_not_null())


def _rank_state(collectives: pl.DataFrame, fr_entries: pl.DataFrame | None) -> pl.DataFrame:
    """Per (rank, pg): how far the rank got, from watchdog/dump-signal lines and FR entries."""
    rows = collectives.filter(pl.col("rank").is_not_null() & (_is_timeout() | pl.col("kind").is_in(PROGRESS_KINDS)))
    logged = rows.select(
        "rank", pl.col("pg_guid").fill_null(DEFAULT_PG).alias("pg"), "last_enqueued", "last_completed",
        pl.when(_is_timeout()).then(pl.col("seq")).alias("timed_out_seq"),
        pl.when(_is_timeout()).then(pl.col("op_type")).alias("op_type"), _is_timeout().alias("timed_out"),
    )  # fmt: skip
    parts = [logged]
    if fr_entries is not None and not fr_entries.is_empty():
        # Flight Recorder: the newest collective each rank enqueued, and the newest it completed.
        recorded = fr_entries.filter(~pl.col("is_p2p").fill_null(False) & pl.col("rank").is_not_null())
        parts.append(
            recorded.group_by("rank", pl.col("pg_name").fill_null(DEFAULT_PG).alias("pg")).agg(
                pl.col("collective_seq_id").max().alias("last_enqueued"),
                pl.col("collective_seq_id").filter(pl.col("state") == "completed").max().alias("last_completed"),
            )
        )
    combined = pl.concat(parts, how="diagonal_relaxed")
    return combined.group_by("rank", "pg").agg(
        pl.col("last_enqueued").max(),
        pl.col("last_completed").max(),
        pl.col("timed_out_seq").min(),
        pl.col("op_type").drop_nulls().first(),
        pl.col("timed_out").fill_null(False).any(),
    )


def _evidence(collectives: pl.DataFrame, rank: int, kinds: list[str]) -> dict | None:
    rows = collectives.filter((pl.col("rank") == rank) & pl.col("kind").is_in(kinds)).sort("file", "line")
    if rows.is_empty():
        return None
    order = {k: i for i, k in enumerate(kinds)}
    # Of lines of the same kind, the one that states the work sequence numbers is the one to quote.
    states = [c for c in ("last_enqueued", "last_completed") if c in rows.columns]
    counted = rows.with_columns(_silent=pl.all_horizontal(pl.col(c).is_null() for c in states) if states else pl.lit(True))
    candidates = counted.select("file", "line", "time", "text", "kind", "_silent").iter_rows(named=True)
    best = min(candidates, key=lambda r: (order[r["kind"]], r["_silent"]))
    best.pop("_silent")
    return best


def _dump_of(fr_entries: pl.DataFrame | None, rank: int) -> dict | None:
    """Evidence pointing at a rank's Flight Recorder dump (a binary file: no line to cite)."""
    if fr_entries is None or fr_entries.is_empty():
        return None
    files = fr_entries.filter(pl.col("rank") == rank)["file"]
    return {"file": files[0], "line": None, "time": None, "text": None} if files.len() else None


def _lagging(state: pl.DataFrame) -> list[tuple[int, str, dict]]:
    """(rank, pg, details) for ranks behind the others inside one PG."""
    out = []
    for pg, group in state.group_by("pg", maintain_order=True):
        for col in ("last_completed", "last_enqueued"):
            known = group.filter(pl.col(col).is_not_null())
            if known.height < 2:
                continue
            low, high = known[col].min(), known[col].max()
            if low == high:
                continue
            behind = known.filter(pl.col(col) == low)
            others = known.filter(pl.col(col) != low)
            if behind.height > others.height or (behind.height == others.height and known.height > 2):
                continue  # the laggards must be the few: a majority "behind" means the few are ahead
            ahead = others[col].mode().min()
            enqueued = behind["last_enqueued"] if "last_enqueued" in behind.columns else pl.Series([None] * behind.height)
            for rank, own_enqueued in zip(behind["rank"].to_list(), enqueued.to_list(), strict=True):
                out.append((rank, pg[0], {"field": col, "lagging_seq": low, "others_seq": ahead,
                                           "ranks_ahead": others.height, "own_enqueued": own_enqueued}))  # fmt: skip
            break
    return out


def _side(lagging: dict) -> str:
    """Where the lagging rank was held up: the host never issued the next collective, or the
    GPU never finished one the host had issued (enqueued past completed). Empty when unknown."""
    enqueued, seq = lagging.get("own_enqueued"), lagging["lagging_seq"]
    if lagging["field"] == "last_enqueued" or enqueued == seq:
        return " (held up on the host: it never issued the next one)"
    if enqueued is not None and enqueued > seq:
        return f" (held up on the GPU: it issued up to #{enqueued}, but #{seq + 1} never finished)"
    return ""


def _silent(state: pl.DataFrame, ranks_seen: list[int], world: int | None) -> tuple[list[int], list[int], list[int]]:
    """(crowd, silent ranks with logs, ranks without logs blamed)."""
    crowd = sorted(set(state.filter(pl.col("timed_out"))["rank"].to_list()))
    seen = sorted(set(ranks_seen) | set(state["rank"].to_list()))
    if len(crowd) < 2 or len(crowd) * 2 <= len(seen):
        return crowd, [], []
    silent = [r for r in seen if r not in set(crowd)]
    unseen: list[int] = []
    if not silent and world:
        missing = [r for r in range(world) if r not in set(seen)]
        waits = state.filter(pl.col("timed_out"))
        one_collective = waits["timed_out_seq"].n_unique() == 1 and waits["op_type"].n_unique() == 1
        if missing and len(missing) * 8 <= world:
            unseen = missing
        elif missing == [0] and crowd == list(range(1, world)) and len(crowd) >= 3 and one_collective and waits["timed_out_seq"].min() > 1:
            # At least three ranks, every one but rank 0, timed out in the same collective past the job's
            # first: rank 0 alone was elsewhere (evaluating, saving, logging). A first collective that
            # never completes is the transport's or the setup's, whoever is missing.
            unseen = missing
    return crowd, silent, unseen


def _op_mismatches(collectives: pl.DataFrame) -> list[tuple[int, str, int, dict]]:
    """(rank, pg, seq, details) where a rank's op/numel at a seq differs from the majority's."""
    work = collectives.filter(pl.col("kind").is_in(["watchdog_timeout", "blocking_wait_timeout"]) & pl.col("seq").is_not_null())
    snapshot = collectives.filter((pl.col("kind") == "desync_report") & (pl.col("detail") == "started")).explode("ranks_named")
    rows = pl.concat(
        [
            work.select("rank", pl.col("pg_guid").fill_null(DEFAULT_PG).alias("pg"), "seq", "op_type", "numel_in", "numel_out"),
            snapshot.select(
                pl.col("ranks_named").alias("rank"),
                pl.col("pg_guid").fill_null(DEFAULT_PG).alias("pg"),
                "seq",
                "op_type",
                "numel_in",
                "numel_out",
            ),  # fmt: skip
        ]
    ).unique(["rank", "pg", "seq", "op_type"], keep="first")
    numel = pl.concat_str(pl.col("op_type"), pl.col("numel_in").cast(pl.String), pl.col("numel_out").cast(pl.String), separator="/")
    out = []
    for (pg, seq), group in rows.group_by("pg", "seq", maintain_order=True):
        # Op types compare everywhere; element counts only where both sides printed them.
        for sig, reason in ((pl.col("op_type"), "op_mismatch"), (numel, "numel_mismatch")):
            sigs = group.select("rank", sig.alias("sig")).drop_nulls()
            if sigs["sig"].n_unique() < 2:
                continue
            majority = sigs["sig"].mode().sort().first()
            for rank, found in sigs.filter(pl.col("sig") != majority).iter_rows():
                out.append((rank, pg, seq, {"expected": majority, "found": found, "reason": reason}))
            break
    return out


def _world(world_size: int | None, topology: pl.DataFrame, exits: pl.DataFrame | None, ranks: Iterable[int]) -> int | None:
    if world_size:
        return world_size
    candidates = [topology["nranks"].max() if not topology.is_empty() else None]
    if exits is not None and not exits.is_empty() and exits["rank"].max() is not None:
        candidates.append(exits["rank"].max() + 1)
    known = [r for r in ranks if r is not None]
    candidates.append(max(known) + 1 if known else None)
    values = [int(c) for c in candidates if c is not None]
    return max(values) if values else None


def _last_lines(lines: pl.DataFrame | None, ranks: list[int]) -> dict[int, dict]:
    """Each rank's last own line: in the file holding most of its lines, torchrun table rows excluded."""
    if lines is None or lines.is_empty() or not ranks:
        return {}
    own = lines.filter(pl.col("rank").is_in(ranks))
    own = own.filter(~pl.col("text").str.contains(_TABLE_ROW))
    own = own.filter(pl.col("file") == pl.col("file").mode().sort().first().over("rank"))
    last = own.sort("line").group_by("rank").last()
    return {r["rank"]: r for r in last.select("rank", "file", "line", "time", "text").iter_rows(named=True)}


def localize_hang(
    collectives: pl.DataFrame | None,
    fr_entries: pl.DataFrame | None,
    nccl_topology: pl.DataFrame | None,
    ranks_seen: Iterable[int],
    world_size: int | None,
    *,
    exits: pl.DataFrame | None = None,
    nccl_warns: pl.DataFrame | None = None,
    lines: pl.DataFrame | None = None,
    fr_pg_status: pl.DataFrame | None = None,
) -> PassResult:
    """Findings naming the culprit ranks of a collective hang, and the per-rank state tables.

    `collectives` is `c10d.parse_collectives` output, `fr_entries` the Flight Recorder
    frame, `nccl_topology` the NCCL topology (for rank -> host/GPU), `ranks_seen` the
    ranks that left any log. Optional: torchrun `exits`, classified `nccl_warns`, the
    LINES frame (to cite a silent rank's last line), and the Flight Recorder `fr_pg_status`
    (each PG's members, to name the ranks that left no dump).
    """
    collectives = conform(collectives, COLLECTIVES) if collectives is not None else empty(COLLECTIVES)
    topology = nccl_topology if nccl_topology is not None else empty({"nranks": pl.Int32})
    ranks_seen = sorted({int(r) for r in ranks_seen if r is not None})
    procs = process_ranks(topology) if "pid" in topology.columns else None
    place = {} if procs is None else {r["global_rank"]: r for r in procs.iter_rows(named=True)}
    hosts = {r: p["host"] for r, p in place.items()}
    for rank, host in collectives.select("rank", "host").drop_nulls().unique(maintain_order=True).iter_rows():
        hosts.setdefault(rank, host)
    world = _world(world_size, topology, exits, ranks_seen + collectives["rank"].drop_nulls().to_list())

    state = _rank_state(collectives, fr_entries)
    findings: list[dict] = []
    reasons: dict[int, list[str]] = {}

    def blame(pattern, title, category, severity, role, rank, evidence, text, captures):
        reasons.setdefault(rank, []).append(pattern)
        findings.append(_finding(pattern, title, category, severity, role, rank, hosts.get(rank), evidence, text,
                                 captures, place.get(rank)))  # fmt: skip

    for rank, pg, d in _lagging(state):
        ev = _evidence(collectives, rank, ["failure_detected", "last_work_status", "dump_signal", *TIMEOUT_KINDS])
        ev = ev or _dump_of(fr_entries, rank)
        what = "completed" if d["field"] == "last_completed" else "enqueued"
        blame("HANG001", "Rank behind the others in a collective", Category.COLLECTIVE_TIMEOUT, Severity.CRITICAL,
              Role.INITIATING, rank, ev,
              f"rank {rank} last {what} work #{d['lagging_seq']} in PG {pg} while {d['ranks_ahead']} other "
              f"{'rank' if d['ranks_ahead'] == 1 else 'ranks'} "
              f"reached #{d['others_seq']}: the others were waiting for it{_side(d)}",
              {"pg": pg, "reason": f"lowest {d['field']}", **d})  # fmt: skip

    # A job of one rank (NCCL itself says every communicator has one) has no one else to wait for:
    # its collective timed out behind its own work on the GPU or the host.
    sole = world == 1 and not topology.is_empty() and topology["nranks"].max() == 1
    for rank in state.filter(pl.col("timed_out"))["rank"].to_list() if sole else []:
        blame("HANG007", "The job's only rank timed out in its own collective", Category.COLLECTIVE_TIMEOUT,
              Severity.CRITICAL, Role.INITIATING, rank, _evidence(collectives, rank, TIMEOUT_KINDS),
              f"rank {rank} is the job's only rank (NCCL: nranks 1) and its collective timed out: the work queued "
              "before it on the same GPU or host never finished",
              {"reason": "sole_rank"})  # fmt: skip

    crowd, silent, unseen = _silent(state, ranks_seen, world)
    crowd_seq = state.filter(pl.col("timed_out"))["timed_out_seq"].mode().sort().first() if crowd else None
    crowd_done = state.filter(pl.col("timed_out"))["last_completed"].drop_nulls().mode().sort().first() if crowd else None
    crowd_ev = _evidence(collectives, crowd[0], TIMEOUT_KINDS) if crowd else None
    last_lines = _last_lines(lines, silent)
    where = f"collective #{crowd_seq} (last completed #{crowd_done})" if crowd_seq is not None else "a collective"
    for rank in silent + unseen:
        has_log = rank in ranks_seen
        ev = last_lines.get(rank) if has_log else crowd_ev
        blame("HANG002", "Rank missing from the collective-timeout crowd", Category.COLLECTIVE_TIMEOUT,
              Severity.CRITICAL if has_log else Severity.ERROR, Role.INITIATING, rank, ev,
              f"{len(crowd)} {'rank' if len(crowd) == 1 else 'ranks'} timed out waiting in {where} but rank {rank} "
              f"{'logged no timeout' if has_log else 'left no log'}: it never reached the collective",
              {"reason": "silent" if has_log else "no_log", "crowd": rank_ranges(crowd), "crowd_seq": crowd_seq,
               "crowd_last_completed": crowd_done})  # fmt: skip

    report = collectives.filter(
        pl.col("kind").is_in(["desync_report", "stall_report"])
        & pl.col("detail").is_in(["never_joined", "joined_not_finished", "finished_not_joined"])
    ).explode("ranks_named")
    for row in report.unique(["ranks_named", "detail"], keep="first", maintain_order=True).iter_rows(named=True):
        rank = row["ranks_named"]
        if rank is None:
            continue
        what = {"never_joined": "never joined any collective", "joined_not_finished": "joined but did not finish",
                "finished_not_joined": "finished the previous collective but did not join"}[row["detail"]]  # fmt: skip
        horovod = row["kind"] == "stall_report"  # Horovod names global ranks and tensors; c10d PG ranks and seqs
        where = f"collective #{row['seq']}"
        if horovod:
            what, where = "never submitted", f"tensor {row['op_type']} that the others wait on"
        blame("HANG004", "Rank named by a desync or stall report", Category.COLLECTIVE_TIMEOUT, Severity.CRITICAL,
              Role.INITIATING, rank, row,
              f"{'Horovod stall' if horovod else 'desync'} report ({_reporter(row['rank'])}): rank {rank} {what} {where}",
              {"reason": row["detail"], "seq": row["seq"], "reported_by": row["rank"], "pg_rank": not horovod})  # fmt: skip

    # A rank setting up its communicator fetches the NCCL unique id that rank 0 of the group publishes
    # in the c10d store; a rank that gave up waiting names the one that never published it.
    waited_for = collectives.filter(pl.col("kind") == "unique_id_wait").explode("ranks_named")
    for row in waited_for.unique("ranks_named", keep="first", maintain_order=True).iter_rows(named=True):
        rank = row["ranks_named"]
        if rank is None or rank == row["rank"]:
            continue
        blame("HANG008", "Rank whose NCCL unique id the others waited for", Category.COLLECTIVE_TIMEOUT, Severity.CRITICAL,
              Role.INITIATING, rank, row,
              f"{_waiter(row['rank'])} gave up waiting for rank {rank} to publish its NCCL unique id in the c10d store: "
              f"rank {rank} never set up its communicator (still busy before its first collective, or dead)",
              {"reason": "unique_id_wait", "reported_by": row["rank"]})  # fmt: skip

    for rank, pg, seq, d in _op_mismatches(collectives):
        ev = collectives.filter((pl.col("rank") == rank) & (pl.col("seq") == seq)).head(1)
        blame("DESYNC001", "Ranks disagree on the collective at the same sequence number", Category.COLLECTIVE_TIMEOUT,
              Severity.CRITICAL, Role.INITIATING, rank, ev.row(0, named=True) if ev.height else None,
              f"rank {rank} ran {d['found']} as collective #{seq} in PG {pg} where the other ranks ran {d['expected']}"
              + (" (op/numel in/numel out)" if d["reason"] == "numel_mismatch" else "") + ": mismatched collectives",
              {"pg": pg, "seq": seq, **d})  # fmt: skip

    fr_mismatches = flight_recorder_mismatches(fr_entries, fr_pg_status)
    for row in fr_mismatches.iter_rows(named=True):
        for rank in parse_ranges(row["ranks"]):
            ev = _dump_of(fr_entries, rank)
            if row["problem"] == "no_dump":
                a_waiting_rank = fr_entries.filter(pl.col("pg_name") == row["pg"])["rank"].min()
                blame("HANG005", "Rank missing from a collective in the Flight Recorder dumps",
                      Category.COLLECTIVE_TIMEOUT, Severity.CRITICAL, Role.INITIATING, rank, _dump_of(fr_entries, a_waiting_rank),
                      f"Flight Recorder: rank {rank} of PG {row['pg']} left no dump while every rank that dumped waits in "
                      f"collective #{row['seq']} ({row['expected']})", {"pg": row["pg"], "seq": row["seq"], "reason": "fr_no_dump"})  # fmt: skip
            elif row["problem"] == "missing_ranks":
                blame("HANG005", "Rank missing from a collective in the Flight Recorder dumps",
                      Category.COLLECTIVE_TIMEOUT, Severity.CRITICAL, Role.INITIATING, rank, ev,
                      f"Flight Recorder: rank {rank} never joined collective #{row['seq']} ({row['expected']}) in PG "
                      f"{row['pg']}; {row['found']}", {"pg": row["pg"], "seq": row["seq"], "reason": "fr_missing"})  # fmt: skip
            else:
                blame("DESYNC001", "Ranks disagree on the collective at the same sequence number",
                      Category.COLLECTIVE_TIMEOUT, Severity.CRITICAL, Role.INITIATING, rank, ev,
                      f"Flight Recorder: rank {rank} recorded {row['found']} as collective #{row['seq']} in PG "
                      f"{row['pg']} where the others recorded {row['expected']} ({row['problem']})",
                      {"pg": row["pg"], "seq": row["seq"], "reason": row["problem"]})  # fmt: skip

    if nccl_warns is not None and not nccl_warns.is_empty():
        net = nccl_warns.filter(pl.col("kind").is_in(NETWORK_WARNS) & pl.col("rank").is_not_null())
        if not net.is_empty():
            first_time = net["time"].min()
            first = net.filter(pl.col("time") == first_time) if first_time is not None else net.head(1)
            for row in first.unique("rank", keep="first", maintain_order=True).iter_rows(named=True):
                blame("NCCLNET001", "NCCL transport error on one rank", Category.NETWORK, Severity.CRITICAL,
                      Role.INITIATING, row["rank"], row,
                      f"NCCL {row['kind'].replace('_', ' ')} on rank {row['rank']} ({row['host']}): {row['msg'][:160]}",
                      {"reason": row["kind"], "ib_status": row["ib_status"], "vendor_err": row["vendor_err"],
                       "peer": row["peer"], "crowd": rank_ranges(crowd)})  # fmt: skip

    if exits is not None and not exits.is_empty():
        timed = exits.filter(pl.col("time").is_not_null() & pl.col("rank").is_not_null())
        if timed.height >= 2:
            first_time = timed["time"].min()
            first = timed.filter(pl.col("time") == first_time)
            # A watchdog abort (-6) is the crowd's exit, not a cause.
            if first.height == 1 and first["exitcode"][0] != -6:
                row = first.row(0, named=True)
                blame("HANG003", "First worker to exit", Category.COLLECTIVE_TIMEOUT, Severity.ERROR, Role.SYMPTOM,
                      row["rank"], row, f"rank {row['rank']} exited first (exitcode {row['exitcode']}"
                      f"{', ' + row['signal'] if row['signal'] else ''}) at {row['time']}",
                      {"reason": "first_exit", "exitcode": row["exitcode"], "signal": row["signal"]})  # fmt: skip

    per_rank = _per_rank_table(state, ranks_seen, world, hosts, reasons)
    frame = pl.DataFrame(findings, schema=FINDINGS) if findings else empty(FINDINGS)
    return PassResult(
        findings=conform(frame, FINDINGS),
        tables={
            "collective_ranks": per_rank,
            "collective_state": summarize_state(per_rank),
            "fr_mismatches": fr_mismatches,
        },
    )


def _per_rank_table(state: pl.DataFrame, ranks_seen: list[int], world: int | None, hosts: dict[int, str],
                    reasons: dict[int, list[str]]) -> pl.DataFrame:  # fmt: skip
    """One row per (rank, pg), plus a row for every rank of the world with nothing to say."""
    known = set(state["rank"].to_list())
    everyone = set(ranks_seen) | known | (set(range(world)) if world else set())
    quiet = sorted(everyone - known)
    filler = pl.DataFrame({"rank": quiet}, schema={"rank": pl.Int32}).with_columns(
        pg=pl.lit(None, pl.String),
        state=pl.when(pl.col("rank").is_in(ranks_seen)).then(pl.lit("silent")).otherwise(pl.lit("no_log")),
    )
    base = state.with_columns(
        state=pl.when(pl.col("timed_out")).then(pl.lit("timed_out"))
        .when(pl.col("last_enqueued") > pl.col("last_completed")).then(pl.lit("pending"))
        .otherwise(pl.lit("idle"))
    )  # fmt: skip
    table = pl.concat([conform(base, COLLECTIVE_RANKS), conform(filler, COLLECTIVE_RANKS)])
    blamed = pl.DataFrame(
        {"rank": list(reasons), "why": ["+".join(sorted(set(v))) for v in reasons.values()]},
        schema={"rank": pl.Int32, "why": pl.String},
    )
    return (
        table.join(blamed, on="rank", how="left")
        .with_columns(
            host=pl.col("rank").replace_strict(hosts, default=None, return_dtype=pl.String),
            state=pl.when(pl.col("why").is_not_null()).then(pl.concat_str(pl.lit("culprit:"), "why")).otherwise("state"),
        )
        .select(list(COLLECTIVE_RANKS))
        .sort("rank", "pg", nulls_last=True)
    )


def summarize_state(per_rank: pl.DataFrame) -> pl.DataFrame:
    """Ranks with identical (pg, seqs, op, state) folded into one row with a rank range."""
    if per_rank.is_empty():
        return empty(COLLECTIVE_STATE)
    keys = ["pg", "last_enqueued", "last_completed", "timed_out_seq", "op_type", "state"]
    grouped = per_rank.group_by(keys, maintain_order=True).agg(pl.col("rank").sort())
    rows = [
        {**{k: row[k] for k in keys}, "ranks": rank_ranges(row["rank"]), "n_ranks": len(row["rank"])}
        for row in grouped.iter_rows(named=True)
    ]
    return pl.DataFrame(rows, schema=COLLECTIVE_STATE).sort(
        pl.col("state").str.starts_with("culprit").not_(), "last_completed", "ranks", nulls_last=True
    )
