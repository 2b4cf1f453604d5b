"""Classify exceptions no pattern knows by where they were raised: the traceback's frames.

Notes:
    An unrecognized `SomethingError: ...` that ends a Python traceback whose frames run
    through checkpoint code (`torch/serialization.py`, `torch/distributed/checkpoint`,
    safetensors, a `save_checkpoint`/`load_checkpoint` function) is a checkpoint I/O
    failure whatever its message (old torch.save says only `write(): fd 29 failed with
    Input/output error`); one raised inside DataLoader machinery is a data-pipeline
    failure; one raised inside a collective call (`EOFError` out of
    `broadcast_object_list` when the broadcast was aborted) is a cascade of that
    collective's failure, never its cause; so is a `Broken pipe` out of
    `multiprocessing/connection.py`, a local pipe to a worker process that had died,
    never a network fault. Where frames of several of these subsystems are on
    the stack, the innermost decides. The finding cites the exception line and names the frame that decided it.
    Exceptions already explained by a catalog pattern, or that a pattern calls a
    consequence (RendezvousClosedError, Horovod's shutdown), are left alone, unless that
    pattern is generic (an errno such as ENOSPC says what, not where): `No space left on
    device` raised from a multiprocessing SemLock is /dev/shm, not checkpoint storage.
    The generic finding is then demoted to a symptom (`demote_overridden`).
    A shape mismatch raised in the optimizer's own step (`torch/optim/sgd.py ... buf.mul_(momentum)`:
    `The size of tensor a (32) must match the size of tensor b (128)`) is optimizer state restored
    from a checkpoint of another model or setup: fresh state is built with each parameter's
    shape (CTX011). A `KeyError: 'optimizer'` raised where the code reads a loaded checkpoint (its innermost
    source line `optimizer.load_state_dict(checkpoint["optimizer"])`) is a checkpoint that
    lacks what the code expects (`missing_checkpoint_keys`).
    A traceback that the log cuts off before its exception line (a pasted excerpt, a
    process killed mid-print) is judged by its frames the same way, citing its last line.
    Python announces the tracebacks it ignored: `Exception ignored in: <function ...__del__>`
    (a finalizer at garbage collection or interpreter exit). Findings inside such a
    traceback are notes (`demote_nonfatal`): the process went on. A thread's death
    (`Exception in thread NAME:`) is not demoted: a DataLoader reader thread that died
    leaves the training loop waiting, and is the cause of what follows.
"""

from __future__ import annotations

import polars as pl

from forensics.passes.frames import CHECKPOINT_FRAMES, DATALOADER_FRAMES, FRAME, THREAD_HEADER
from forensics.schema import FINDINGS, conform, empty

# `ValueError: ...`, `torch.OutOfMemoryError: ...` (after a launcher's prefix, or a markdown quote's
# `> `), and the exceptions whose names say neither:
# a data iterator that ran out (`StopIteration`), a full queue (`queue.Full`), an interrupt.
EXCEPTION_LINE = (
    r"(?:^(?:>+ ?)?|\]:?\s?|: )(?:(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)"
    r"|StopIteration|KeyboardInterrupt|SystemExit|(?:_?queue\.)?(?:Full|Empty))(?::\s|\s*$)"
)

# The line Python's sys.unraisablehook prints above a traceback it ignored, after a launcher's prefix if any.
NONFATAL_HEAD = r"(?:^|\]:?\s?)Exception ignored in\b"
TRACEBACK_HEAD = "Traceback (most recent call last)"

# (pattern id, category, title, frames that decide it, generic patterns it overrides, what the
# exception line must say: None for any exception, or a cut traceback)
CONTEXTS = [
    (
        "CTX003",
        "ENVIRONMENT",
        "Shared memory (/dev/shm) exhausted while creating a multiprocessing lock or buffer",
        r"multiprocessing/synchronize\.py|SemLock|multiprocessing/heap\.py|torch/multiprocessing/reductions\.py",
        frozenset({"CKPT001"}),
        r"No space left on device|Cannot allocate memory|\[Errno (?:28|12)\]",  # a KeyboardInterrupt in a lock is no full /dev/shm
    ),
    (
        "CTX001",
        "CHECKPOINT_IO",
        "Exception raised inside checkpoint save/load code",
        CHECKPOINT_FRAMES,
        frozenset(),
        None,
    ),
    (
        "CTX002",
        "DATA_PIPELINE",
        "Exception raised inside data-loading code",
        DATALOADER_FRAMES,
        # An errno says what went wrong with a file, not which file: raised while reading data
        # (a path missing, unreadable, an NFS handle gone stale), it is the data's.
        frozenset({"CKPT004", "CKPT009", "CKPT010", "CKPT015"}),
        None,
    ),
    (
        "CTX004",
        "ENVIRONMENT",
        "Exception raised while setting up the process group or rendezvous",
        r"torch/distributed/elastic/rendezvous/|torch/distributed/rendezvous\.py|in init_process_group\b|in _create_c10d_store\b",
        frozenset(),
        None,
    ),
    (
        "CTX005",
        "ENVIRONMENT",
        "Exception raised while building or loading a compiled extension",
        r"torch/utils/cpp_extension\.py|deepspeed/ops/op_builder/|in _jit_compile\b|in load_extension\b",
        frozenset(),
        None,
    ),
    (
        "CTX011",
        "CHECKPOINT_IO",
        "A shape mismatch inside the optimizer's step: its state, restored from a checkpoint, does not fit the parameters",
        r"torch/optim/\w+\.py",
        frozenset(),
        r"must match the size of tensor b|size mismatch|shape mismatch|[Ss]izes? of tensors must match|doesn't match the size",
    ),
    (
        "CTX006",
        "COLLECTIVE_TIMEOUT",
        "Exception raised inside a collective call: the collective failed under it",
        r"torch/distributed/distributed_c10d\.py",
        frozenset(),
        None,
    ),
    (
        "CTX009",
        "UNKNOWN",
        "A pipe to another local process broke: the process at the other end had died",
        r"multiprocessing/connection\.py",
        frozenset({"GEN008"}),
        r"Broken pipe|Connection reset by peer|\[Errno (?:32|104)\]|^\s*EOFError\b",  # never the network: a local pipe
    ),
]
# A failed collective is a consequence of what stopped it (a peer that died, hung or timed out):
# the exception it raised shows where a rank was hurt, not why; so is a broken pipe to a local
# worker (a vectorized environment, a pool): the worker died first, of its own error.
CONSEQUENCES = {"CTX006", "CTX009"}
# Findings that cite a Python traceback nobody caught (its exception line, or its last line where
# the log cuts it off): the process that printed it died of it.
UNCAUGHT = frozenset({pattern for pattern, *_ in CONTEXTS} - CONSEQUENCES | {"EXC001", "EXC002", "CTX010"})


STREAM = ["file", "block", "rank"]


def _tracebacks(lines: pl.DataFrame) -> pl.LazyFrame:
    """The lines of every Python traceback block (one whose header was cut off included).

    A live thread's stack in a faulthandler dump has traceback-like frames but raised
    nothing: its block (opened by a thread header) is not a traceback.
    """
    blocks = (
        lines.lazy()
        .filter(pl.col("text").str.contains("Traceback (most recent call last)", literal=True) | pl.col("text").str.contains(FRAME))
        .select(STREAM)
        .unique()
    )
    dumps = lines.lazy().filter(pl.col("text").str.contains(THREAD_HEADER)).select(STREAM).unique()
    blocks = blocks.join(dumps, on=STREAM, how="anti", nulls_equal=True)
    return lines.lazy().join(blocks, on=STREAM, how="semi", nulls_equal=True)


def _endings(scoped: pl.LazyFrame) -> pl.LazyFrame:
    """Each traceback's last exception line, or its last line when the log cuts it after some
    frames but before an exception line (`cut`); a lone header with no frame says too little."""
    is_exception = pl.col("text").str.contains(EXCEPTION_LINE) & ~pl.col("text").str.contains(FRAME)
    exceptions = scoped.filter(is_exception).sort("line").group_by(STREAM, maintain_order=True).last()
    with_frames = scoped.filter(pl.col("text").str.contains(FRAME)).select(STREAM).unique()
    cut = (
        scoped.join(with_frames, on=STREAM, how="semi", nulls_equal=True)
        .sort("line")
        .group_by(STREAM, maintain_order=True)
        .last()
        .join(exceptions.select(STREAM), on=STREAM, how="anti", nulls_equal=True)
    )
    return pl.concat([exceptions.with_columns(cut=pl.lit(False)), cut.with_columns(cut=pl.lit(True))])


def classify_by_frames(lines: pl.DataFrame, findings: pl.DataFrame) -> pl.DataFrame:
    """Findings for unexplained tracebacks whose frames reveal the subsystem they ended in."""
    if lines.is_empty():
        return empty(FINDINGS)
    scoped = _tracebacks(lines)
    endings = _endings(scoped)
    frames = scoped.filter(pl.col("text").str.contains(FRAME))
    hits = []
    for order, (pattern, category, title, where, overrides, saying) in enumerate(CONTEXTS):
        # A line explained by a specific pattern stays explained; a generic one (an errno
        # that could come from anywhere) yields to the frames that say where it came from.
        # A line a pattern calls a consequence (cascade, teardown) is never made a cause.
        explained = (
            findings.filter(
                ((pl.col("category") != "UNKNOWN") & ~pl.col("pattern").is_in(list(overrides)))
                | pl.col("role").is_in(["cascade", "teardown"])
            )
            .select("file", "line")
            .unique()
        )
        unexplained = endings.join(explained.lazy(), on=["file", "line"], how="anti")
        if saying is not None:
            unexplained = unexplained.filter(pl.col("text").str.contains(saying))
        deciding = (
            frames.filter(pl.col("text").str.contains(where))
            .group_by(STREAM)
            .agg(frame=pl.col("text").last(), frame_line=pl.col("line").last())
        )
        found = unexplained.join(deciding, on=STREAM, how="inner", nulls_equal=True).with_columns(
            pattern=pl.lit(pattern),
            title=pl.lit(title),
            category=pl.lit(category),
            severity=pl.lit("error"),
            role=pl.lit("cascade" if pattern in CONSEQUENCES else "initiating"),
            captures=pl.struct("frame", "frame_line", "cut").struct.json_encode(),
            order=pl.lit(order),
        )
        hits.append(found)
    # Where several subsystems' frames are on the stack, the innermost raised it: a barrier
    # that a checkpoint callback called failed in the collective, not in the checkpoint.
    deepest_first = pl.concat(hits).sort(["frame_line", "order"], descending=[True, False])
    result = deepest_first.collect().unique(["file", "line"], keep="first", maintain_order=True).sort("file", "line")
    return conform(result, FINDINGS)


# The innermost lines of a traceback that read a loaded checkpoint: a `load_state_dict` call (or
# torch's own frame `in load_state_dict`), or a key looked up in a dict named for one
# (`checkpoint["optimizer"]`, `latest_state['net']`, `ckpt['model']`).
CHECKPOINT_READ = r"(?i)\bload_state_dict\b|\b\w*(?:ckpt|checkpoint|state_dict|state)\w*\s*\[\s*['\"]"


def missing_checkpoint_keys(lines: pl.DataFrame, findings: pl.DataFrame) -> pl.DataFrame:
    """CTX010: an unexplained `KeyError: 'name'` whose innermost frame or source line reads a
    loaded checkpoint: the file lacks what the code expects (weights saved without the optimizer,
    a bare state dict where a training snapshot was expected, another version's layout)."""
    if lines.is_empty() or not lines["text"].str.contains("KeyError: ", literal=True).any():
        return empty(FINDINGS)
    text = pl.col("text")
    scoped = _tracebacks(lines).with_columns(
        _above=pl.concat_str(text.shift(2), text.shift(1), separator="\n").over(STREAM, order_by="line")
    )
    found = (
        _endings(scoped)
        .filter(~pl.col("cut") & text.str.contains(r"KeyError: ['\"]") & pl.col("_above").str.contains(CHECKPOINT_READ).fill_null(False))
        .join(findings.lazy().filter(pl.col("category") != "UNKNOWN").select("file", "line").unique(), on=["file", "line"], how="anti")
        .with_columns(
            pattern=pl.lit("CTX010"),
            title=pl.lit("A key the code reads from a loaded checkpoint is not in it"),
            category=pl.lit("CHECKPOINT_IO"),
            severity=pl.lit("error"),
            role=pl.lit("initiating"),
            captures=pl.struct(read=pl.col("_above").str.split("\n").list.last().str.strip_chars()).struct.json_encode(),
        )
        .collect()
    )
    return conform(found, FINDINGS)


def uncaught_exceptions(lines: pl.DataFrame, findings: pl.DataFrame) -> pl.DataFrame:
    """EXC001/EXC002: the end of each traceback that no finding explains.

    Tier 4 of the evidence: a program died of something nobody recognized (EXC001, its
    exception line), or the log stops inside its traceback (EXC002, the last line shown).
    Either says that a rank failed and where (UNKNOWN, symptom): never "healthy".
    """
    if lines.is_empty():
        return empty(FINDINGS)
    endings = (
        _endings(_tracebacks(lines))
        .join(findings.lazy().select("file", "line").unique(), on=["file", "line"], how="anti")
        .with_columns(
            pattern=pl.when(pl.col("cut")).then(pl.lit("EXC002")).otherwise(pl.lit("EXC001")),
            title=pl.when(pl.col("cut"))
            .then(pl.lit("Traceback cut off before its exception line"))
            .otherwise(pl.lit("Uncaught exception that no known signature explains")),
            category=pl.lit("UNKNOWN"),
            severity=pl.lit("error"),
            role=pl.lit("symptom"),
        )
        .collect()
    )
    return conform(endings, FINDINGS)


def demote_overridden(findings: pl.DataFrame, context_findings: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Generic findings inside a traceback that a frame context re-classified become symptoms of it,
    or cascades where the context is itself a consequence. A generic finding on the very line a
    consequence context cites is dropped: `Broken pipe` out of a local pipe is no network fault,
    and the context's finding cites the line."""
    overridden = sorted({pid for *_rest, overrides, _saying in CONTEXTS for pid in overrides})
    if context_findings.is_empty() or not overridden:
        return findings
    block_of = lines.select("file", "line", "block").unique(["file", "line"])
    relabelled = (
        context_findings.select("file", "line", _consequence=pl.col("pattern").is_in(list(CONSEQUENCES)))
        .join(block_of, on=["file", "line"])
        .group_by("file", "block")
        .agg(pl.col("_consequence").all())
    )
    in_block = (
        findings.select("file", "line")
        .join(block_of, on=["file", "line"], how="left")
        .join(relabelled.with_columns(_context=pl.lit(True)), on=["file", "block"], how="left")
    )
    marked = findings.join(
        in_block.select("file", "line", "_context", "_consequence").unique(["file", "line"]),
        on=["file", "line"],
        how="left",
        maintain_order="left",
    )
    demote = pl.col("_context").fill_null(False) & pl.col("pattern").is_in(overridden)
    consequence = demote & pl.col("_consequence").fill_null(False)
    cited = context_findings.filter(pl.col("pattern").is_in(list(CONSEQUENCES))).select("file", "line", _cited=pl.lit(True)).unique()
    marked = marked.join(cited, on=["file", "line"], how="left", maintain_order="left")
    role = pl.when(consequence).then(pl.lit("cascade")).when(demote).then(pl.lit("symptom")).otherwise(pl.col("role"))
    kept = marked.filter(~(consequence & pl.col("_cited").fill_null(False)))
    return kept.with_columns(role=role).drop("_context", "_consequence", "_cited")


def demote_nonfatal(findings: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Findings inside a traceback Python ignored become notes (warning, event): see NONFATAL_HEAD."""
    if findings.is_empty() or lines.is_empty():
        return findings
    ordered = lines.select("file", "line", "block", "text").sort("file", "line")
    heads = ordered.with_columns(above=pl.col("text").shift(1).over("file")).filter(
        pl.col("text").str.contains(TRACEBACK_HEAD, literal=True) & pl.col("above").str.contains(NONFATAL_HEAD).fill_null(False)
    )
    if heads.is_empty():
        return findings
    inside = ordered.join(heads.select("file", "block").unique(), on=["file", "block"], how="semi").select(
        "file", "line", _nonfatal=pl.lit(True)
    )
    marked = findings.join(inside.unique(["file", "line"]), on=["file", "line"], how="left", maintain_order="left")
    nonfatal = pl.col("_nonfatal").fill_null(False)
    return marked.with_columns(
        severity=pl.when(nonfatal).then(pl.lit("warning")).otherwise(pl.col("severity")),
        role=pl.when(nonfatal).then(pl.lit("event")).otherwise(pl.col("role")),
    ).drop("_nonfatal")
