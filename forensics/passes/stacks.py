"""Where a live process was waiting: py-spy, faulthandler and gdb stack dumps.

Notes:
    A stack dump is taken of a job that hangs (py-spy dump, faulthandler on SIGTERM or
    SIGUSR1, `dump_traceback_later`, gdb's `thread apply all bt`). Each thread's block opens
    with a header — py-spy `Thread 120142 (idle): "MainThread"`, faulthandler `Thread
    0x00007f… (most recent call first):` or `Current thread 0x…`, gdb `Thread 1 (Thread 0x…
    (LWP 496116)):` — and lists its frames most recent first: py-spy `    func (path.py:123)`,
    faulthandler `  File "path.py", line 123 in func`, gdb `#5  0x… in func () from lib.so`.
    The line splitter already groups a header with its frames into one block.
    A thread's frames say what it waited for, first matching context wins:
    - STACK001 (DATA_PIPELINE, initiating): waiting for a DataLoader batch, or in the
      `__next__` of a framework's data iterator; the workers are stuck or dead and the
      step cannot start;
    - STACK002 (CHECKPOINT_IO, initiating): inside checkpoint save/load code;
    - STACK003 (COLLECTIVE_TIMEOUT, cascade): waiting in a collective or barrier (Python's
      torch.distributed, or natively an NCCL entry point or c10d's collective calls), which
      is what the victims of a hang do while they wait for the one rank that is not there;
    - STACK006 (ENVIRONMENT, initiating): waiting for a compiled extension's build lock
      (`FileBaton.wait` in torch.utils.cpp_extension): another process builds it, or a
      killed build left its lock behind and the wait never ends;
    - STACK005 (UNKNOWN, symptom): waiting in a CUDA synchronize call, the host done and
      the GPU not: a kernel that does not end. Which kernel a stack cannot say (a collective
      kernel spinning for its peer looks the same), so it names no cause.
    One finding per (file, rank, context), citing the deciding frame of the first such thread.
    `odd_stack_out`: when at least two ranks' dumps wait in a collective (STACK003) and
    exactly one other dumped rank waits in neither a collective nor a GPU synchronize
    (STACK005 may be the same collective seen from the GPU), that rank is what they wait
    for (STACK004, COLLECTIVE_TIMEOUT, initiating), citing the top frame of its main thread
    (faulthandler's `Current thread`, py-spy's `MainThread`, gdb's `Thread 1`).
    `what_the_stalled_rank_did`: a rank that hang localization blamed (HANG00x: it never
    reached the collective the others waited in) and whose own dump shows it waiting for
    data or inside checkpoint code stalled for that reason: its HANG finding takes the
    dump's category and says so. The dump's line stays cited as its own finding.
"""

from __future__ import annotations

import polars as pl

from forensics.passes.frames import CHECKPOINT_FRAMES, STACK_FRAME, THREAD_HEADER
from forensics.schema import FINDINGS, conform, empty

# (pattern id, category, role, title, frames that decide it)
WAITS = [
    (
        "STACK006",
        "ENVIRONMENT",
        "initiating",
        "Stack dump: a thread was waiting for a compiled extension's build lock",
        # torch.utils.cpp_extension waits on a FileBaton (a `lock` file in the build directory)
        # while another process builds; a lock left by a killed build is never released.
        r"torch/utils/file_baton\.py|\bFileBaton\b|file_baton\.py\", line \d+ in wait\b",
    ),
    (
        "STACK002",
        "CHECKPOINT_IO",
        "initiating",
        "Stack dump: a thread was inside checkpoint save/load code",
        CHECKPOINT_FRAMES,
    ),
    (
        "STACK001",
        "DATA_PIPELINE",
        "initiating",
        "Stack dump: the training thread was waiting for a DataLoader batch",
        # The consumer's side (the pin-memory thread always idles), or a framework's own batch
        # iterator under a `data` package waiting for its loader (fairseq's BufferedIterator).
        r"torch/utils/data/dataloader\.py|__next__ \(\S*\bdata/\S+\.py:\d+\)|\bdata/\S+\.py\", line \d+ in __next__\b",
    ),
    (
        "STACK003",
        "COLLECTIVE_TIMEOUT",
        "cascade",
        "Stack dump: a thread was waiting in a collective or barrier",
        r"torch/distributed/distributed_c10d\.py|\b(?:all_reduce|all_gather\w*|reduce_scatter\w*|broadcast|barrier|monitored_barrier)\b.*torch/distributed"
        # native: an NCCL entry point, or c10d's collective and wait calls (never its watchdog thread)
        r"|\bnccl(?:AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|Send|Recv|GroupEnd)\w* ?\("
        r"|\bc10d::\w+::(?:allreduce|allgather|_allgather_base|broadcast|reduce_scatter|_reduce_scatter_base|barrier|alltoall\w*)\b"
        r"|\bc10d::\w+::Work\w*::wait\b",
    ),
    (
        "STACK005",
        "UNKNOWN",
        "symptom",
        "Stack dump: the host thread was waiting for the GPU to finish its queued work, a hang on the GPU side",
        # The host side is done; a kernel that does not end (often a collective kernel whose peer
        # never joined) holds it there: CUDA's synchronize calls, torch.cuda.synchronize.
        r"\bcu(?:da)?(?:Stream|Device|Event|Ctx)Synchronize\b|\bsynchronize \(\S*torch/cuda/__init__\.py:\d+\)"
        r"|torch/cuda/__init__\.py\", line \d+ in synchronize\b",
    ),
]
STREAM = ["file", "rank", "block"]


def stack_waits(lines: pl.DataFrame) -> pl.DataFrame:
    """STACK00x findings: what each dumped thread was waiting in."""
    if lines.is_empty():
        return empty(FINDINGS)
    headers = lines.lazy().filter(pl.col("text").str.contains(THREAD_HEADER)).select(*STREAM, header=pl.col("text").str.strip_chars())
    frames = lines.lazy().join(headers, on=STREAM, how="inner", nulls_equal=True).filter(pl.col("text").str.contains(STACK_FRAME))
    found = []
    for pattern, category, role, title, where in WAITS:
        deciding = (
            frames.filter(pl.col("text").str.contains(where))
            .sort("line")
            .group_by(["file", "rank"], maintain_order=True)
            .first()
            .with_columns(
                pattern=pl.lit(pattern),
                title=pl.lit(title),
                category=pl.lit(category),
                severity=pl.lit("error"),
                role=pl.lit(role),
                captures=pl.struct(thread="header").struct.json_encode(),
            )
        )
        found.append(deciding)
    result = pl.concat(found).collect()
    # A thread counts once: the first context in WAITS order that its frames match.
    first_per_thread = result.unique(STREAM, keep="first", maintain_order=True)
    return conform(first_per_thread, FINDINGS)


def odd_stack_out(lines: pl.DataFrame, waits: pl.DataFrame) -> pl.DataFrame:
    """STACK004 for the one dumped rank not waiting in a collective while the others are."""
    if lines.is_empty():
        return empty(FINDINGS)
    headers = lines.filter(pl.col("text").str.contains(THREAD_HEADER) & pl.col("rank").is_not_null())
    dumped = headers["rank"].unique()
    waiting = waits.filter((pl.col("pattern") == "STACK003") & pl.col("rank").is_not_null())["rank"].unique()
    on_gpu = waits.filter((pl.col("pattern") == "STACK005") & pl.col("rank").is_not_null())["rank"].unique()
    odd = dumped.filter(~dumped.is_in(waiting.implode()) & ~dumped.is_in(on_gpu.implode()))
    if waiting.len() < 2 or odd.len() != 1:
        return empty(FINDINGS)
    rank = odd[0]
    main_first = pl.col("text").str.contains(r"Current thread|MainThread|^Thread 1 \(").not_()  # main thread's block sorts first
    block = headers.filter(pl.col("rank") == rank).sort(main_first, "file", "line").head(1).select("file", "block", "rank")
    top = lines.join(block, on=["file", "block", "rank"], how="semi").filter(pl.col("text").str.contains(STACK_FRAME)).sort("line").head(1)
    found = top.with_columns(
        pattern=pl.lit("STACK004"),
        title=pl.lit(f"Rank {rank} was the only one not waiting in a collective when the stacks were dumped"),
        category=pl.lit("COLLECTIVE_TIMEOUT"),
        severity=pl.lit("error"),
        role=pl.lit("initiating"),
        captures=pl.struct(waiting_ranks=pl.lit(", ".join(map(str, waiting.sort().to_list())))).struct.json_encode(),
    )
    return conform(found, FINDINGS)


def what_the_stalled_rank_did(findings: pl.DataFrame) -> pl.DataFrame:
    """HANG findings re-categorized by the stalled rank's own stack dump (see Notes)."""
    doing = (
        findings.filter(pl.col("pattern").is_in(["STACK001", "STACK002"]) & pl.col("rank").is_not_null())
        .sort("file", "line")
        .group_by("rank", maintain_order=True)
        .first()
        .select("rank", _doing_category="category", _doing_title="title", _doing_at=pl.format("{}:{}", "file", "line"))
    )
    if doing.is_empty():
        return findings
    stalled = pl.col("pattern").str.starts_with("HANG") & (pl.col("role") == "initiating") & pl.col("_doing_category").is_not_null()
    explained = findings.join(doing, on="rank", how="left", maintain_order="left").with_columns(
        category=pl.when(stalled).then("_doing_category").otherwise("category"),
        title=pl.when(stalled)
        .then(
            pl.format(
                "{}; its own stack dump ({}) shows why: {}", "title", "_doing_at", pl.col("_doing_title").str.replace("^Stack dump: ", "")
            )
        )
        .otherwise("title"),
    )
    return explained.drop("_doing_category", "_doing_title", "_doing_at")
