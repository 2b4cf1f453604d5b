"""Text logs -> the LINES frame: one row per physical line, with rank, host, time, block.

Works on every text input (rank logs, combined console logs, NCCL debug files, kernel
logs): a file is read and decoded once, then split, cleaned and decoded entirely with
Polars expressions over the whole column. A physical line is split (keeping its line
number) at carriage returns and where another process's `[rankN]:` prefix is glued to it.

Rank comes from the line's launcher prefixes first (formats.md 0, 4.4, 4.5): `[rankN]:`
(c10 and the Python excepthook: global rank), `[<role>N]:` (torchrun --tee: local rank),
`N: ` (srun --label: global task id), `[job,N]<stdout>:` (mpirun --tag-output); then
from the file name; then from an in-payload tag in any case: `[Rank N]` / `[Rank N/W]`
(DeepSpeed log_dist, c10d, print-style trainers; `[GPU rank N]`, `[global rank N]`), `[rankN]` (a logging format with the
rank), `[rank: N]` (Lightning), `rank:  N | ` at the start (ParlAI); never `[rankN]:`, which starts another process's output
glued to the end of this line (a progress bar without a newline).
A file whose tags all name one rank that differs from its file name is reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from forensics.incident import FileStatus
from forensics.ingest.condense import AFTER_HIT, BEFORE_HIT, WORDS_ONLY, Keep, condense, metric_lines_per_file
from forensics.ingest.text import decode, is_compressed, read_bytes, read_pieces
from forensics.ingest.timestamps import infer_year, line_time
from forensics.schema import FINDINGS, LINES, InputStatus, conform, empty

ANSI = r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07"

# pdsh / DeepSpeed multi-node `<host>: ` (formats.md 0), and slurmstepd's `slurmstepd-<host>: `:
# a lowercase name with a digit (node12, gpu20-15, worker-0) or an IPv4 address.
HOST_PREFIX = r"(?:slurmstepd-)?(?P<host>[a-z][a-z0-9-]*\d[a-z0-9-]*(?:\.[a-z0-9-]+)*|\d{1,3}(?:\.\d{1,3}){3}): "
# Stacked launcher prefixes at the start of a line, outermost first (formats.md 0).
PREFIX = (
    r"^(?:\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}"  # mpirun --timestamp-output
    r"|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?:? )?"  # kubectl/Loki/platform stamp
    r"(?:" + HOST_PREFIX.replace("?P<host>", "?:") + r")?"
    r"(?:"
    r"\s*(?:P\d+ +)?\s*\d+: "  # srun --label, right-aligned task id
    r"|\[\d+,\d+\]<std(?:out|err)>:"  # mpirun --tag-output
    r"|\[rank\d+\]: ?"  # c10 `[rank0]: ` (one space of its own)
    r"|\[[A-Za-z_]*\d+\]:"  # torchrun --tee `[default0]:` (the payload follows at once)
    r"|\(\w+ pid=\d+(?:, ip=[\d.]+)?\) "  # Ray actor
    r"|[\w.]+/\d+ "  # NeMo-Run / torchx role
    r"|>+ ?"  # a log pasted as a markdown quote (a reply quoting it)
    r")*"
)
# A c10 `[rankN]:` prefix glued to the end of another process's unfinished line (a progress
# bar without its newline): the output after it is rank N's, so the line is split there as at
# a carriage return. Stacked prefixes (`[default0]:[rank0]:`) and mentions after a space stay.
GLUED_PREFIX = r"([^\s:])(\[rank\d+\]:)"
MIN_HOST_LINES = 3
# Metric lines the whole incident keeps when its large files are condensed (see condense.py).
METRIC_LINE_BUDGET = 200_000
CHUNK_BYTES = 16 << 20  # a larger (or compressed) file is read and condensed this much at a time
MAX_LINE_CHARS = 64 << 10  # of one line, what the patterns and passes read
CONTEXT_LINES = BEFORE_HIT + AFTER_HIT  # the lines of one piece condensed again with the next
NCCL_HOST = r"([^\s:\[\]]+):\d+:\d+ (?:\[\d+\] )?(?:\S+:\d+(?: \([^)]*\))? )?NCCL (?:INFO|WARN)"
# A line continues the block above it: traceback frames (indented by 2+ spaces or a tab, or a
# `File "…", line N` frame whatever its indent, none included: `[rank0]:  File` loses one space
# to the prefix, a paste may lose them all;
# Megatron's ` iteration N/ M |` lines start with a single space and are not frames),
# C++ stacks (`frame #3: ...`, gdb's `#3  0x… in func (...)`), chained-exception notes, and
# PyTorch's fixed CUDA-error boilerplate.
CONTINUATION = (
    r"^(?:(?:  |\t)\s*\S|\s*File \"[^\"]+\", line \d+|frame #\d+|#\d+ +(?:0x[0-9a-fA-F]+ in |[^\s(]+ ?\()|Exception raised from |During handling of the above|The above exception"
    r"|CUDA kernel errors might be asynchronously|For debugging consider passing|Compile with `?TORCH_USE_CUDA_DSA)"
)
# After these, even a plain line stays in the block (the exception line that ends a Python
# traceback). Not after a C++ `frame #N`: a stack ends the block, and the next line is news.
# So does a frame's source line. A blank line passes on what the line above it carries (a
# traceback pasted double-spaced, its indents lost).
CARRIES_ON = r"^(?:(?:  |\t)\s*\S|\s*File \"[^\"]+\", line \d+|During handling of the above|The above exception)"
PYTHON_FRAME = r"^\s*File \"[^\"]+\", line \d+"
EXCEPTION_NAME = r"^[A-Za-z_][\w.]*(?::\s|:?\s*$)"


@dataclass(frozen=True)
class TextFile:
    path: str  # relative to the incident root
    rank: int | None  # from the file name
    local_rank: int | None = None  # from a torchrun --log-dir tree


def _file_frame(root: Path, item: TextFile, keep: Keep, metric_lines: int) -> tuple[pl.DataFrame, FileStatus]:
    """One file's physical lines (condensed when large: condense.py) and how reading it went."""
    path = root / item.path
    try:
        if path.stat().st_size > CHUNK_BYTES or is_compressed(path):
            return _chunked_frame(path, item, keep, metric_lines)
        payload = read_bytes(path)
    except OSError as exc:
        return empty({"line": pl.Int64, "raw": pl.String, "file": pl.String, "segment": pl.UInt32}), FileStatus(
            item.path, InputStatus.SKIPPED, f"unreadable: {exc.strerror or exc}"
        )
    frame, replaced, too_long = _split(payload.data, first_line=1)
    problems = [payload.problem] if payload.problem else []
    if replaced:
        problems.append(f"{replaced} invalid UTF-8 sequences replaced")
    if too_long:
        problems.append(_long_lines(too_long))
    status = InputStatus.PARTIAL if payload.problem or too_long else InputStatus.PARSED
    data = payload.data
    cut = not data.endswith(b"\n") and bool(data.strip()) and not payload.problem
    n_lines = frame.height
    del data, payload
    frame = _finish(condense(frame, keep, metric_lines), item)
    return frame, FileStatus(item.path, status, "; ".join(problems) or None, n_lines, cut, frame.height)


def _chunked_frame(path: Path, item: TextFile, keep: Keep, metric_lines: int) -> tuple[pl.DataFrame, FileStatus]:
    """A large or compressed file read and condensed CHUNK_BYTES at a time, so memory holds
    two pieces whatever the file inflates to.

    Each piece is condensed together with the last lines of the one before it, so a failure
    near a boundary keeps its context on both sides; lines kept twice are kept once. A
    piece's share of the file's metric-line budget is its share of the file's stored bytes.
    """
    kept, replaced, too_long, next_line, overlap, last, problem = [], 0, 0, 1, None, b"", None
    for piece in read_pieces(path, CHUNK_BYTES):
        frame, bad, long = _split(piece.data, next_line)
        replaced += bad
        continued = last not in (b"", b"\n")  # this piece's first row goes on the last piece's line
        too_long += long - int(continued and long > 0 and frame["raw"].str.len_chars()[0] == MAX_LINE_CHARS)
        window = frame if overlap is None else pl.concat([overlap, frame])
        kept.append(condense(window, keep, max(1, int(metric_lines * piece.share)), head=next_line == 1, tail=piece.last))
        overlap = _copied(frame.tail(CONTEXT_LINES))
        last = piece.data[-1:] if piece.data else last
        problem = piece.problem
        # A line longer than a piece goes on in the next one: it keeps its number there, so every
        # later line keeps the number it has in the file (the quote shows the line's first piece).
        next_line += frame.height - (last != b"\n")
    problems = [problem] if problem else []
    if replaced:
        problems.append(f"{replaced} invalid UTF-8 sequences replaced")
    if too_long:
        problems.append(_long_lines(too_long))
    frame = _finish(pl.concat(kept).unique("line", keep="first", maintain_order=True).sort("line"), item)
    status = InputStatus.PARTIAL if problem or too_long else InputStatus.PARSED
    cut = last != b"\n" and not problem
    return frame, FileStatus(item.path, status, "; ".join(problems) or None, next_line - 1, cut, frame.height)


def _split(data: bytes, first_line: int) -> tuple[pl.DataFrame, int, int]:
    """(`line`, `raw`) rows of `data` numbered from `first_line`, how many invalid UTF-8
    sequences were replaced, and how many lines were longer than MAX_LINE_CHARS and keep only
    that much. Valid text (the usual case) goes to Polars as it is, which splits it 5x faster
    than Python; a "\r" before a "\n" goes with it. A line's first 64 Ki characters say what it
    is; the rest of a megabytes-long one (a tqdm bar redrawn with "\r", a blob logged whole, a
    decompression bomb) would only make every pattern scan it."""
    replaced = 0
    try:
        frame = pl.read_lines(data, name="raw")
    except pl.exceptions.ComputeError:
        text, replaced = decode(data)
        frame = pl.read_lines(text.encode(), name="raw")
    too_long = frame.select((pl.col("raw").str.len_bytes() > MAX_LINE_CHARS).sum()).item()
    if too_long:
        frame = frame.with_columns(pl.col("raw").str.slice(0, MAX_LINE_CHARS))
    return frame.with_row_index("line", offset=first_line).with_columns(pl.col("line").cast(pl.Int64)), replaced, too_long


def _long_lines(count: int) -> str:
    return f"{count} line(s) longer than {MAX_LINE_CHARS:,} characters: only their start is read"


def _copied(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with its text copied out of the buffer it was cut from (see condense)."""
    return frame.with_columns(pl.concat_str(pl.col("raw"), pl.lit("")))


def _finish(frame: pl.DataFrame, item: TextFile) -> pl.DataFrame:
    return frame.with_columns(
        file=pl.lit(item.path),
        segment=(pl.col("line").diff().fill_null(1) > 1).cum_sum(),  # runs of lines kept without a cut
    )


def _prefix_ranks(lines: pl.LazyFrame) -> pl.LazyFrame:
    # Materialize the prefix once: every expression below reads it (re-running PREFIX each time was 5x slower).
    with_prefix = lines.with_columns(_prefix=pl.col("text").str.extract(f"({PREFIX})"))
    prefix = pl.col("_prefix")
    with_role = with_prefix.with_columns(_role=prefix.str.extract_groups(r"\[(?P<role>[A-Za-z_]*)(?P<n>\d+)\]:"))
    role_name, role_number = pl.col("_role").struct.field("role"), pl.col("_role").struct.field("n")
    tagged_global = pl.coalesce(
        prefix.str.extract(r"\[rank(\d+)\]:"),
        prefix.str.extract(r"\[\d+,(\d+)\]<"),
        prefix.str.extract(r"^\s*(?:P\d+ +)?\s*(\d+): "),
        pl.when(role_name == "").then(role_number),
    ).cast(pl.Int32, strict=False)
    local = pl.when(~role_name.is_in(["", "rank"])).then(role_number)
    return with_role.with_columns(
        tag_rank=tagged_global,
        tag_local=local.cast(pl.Int32, strict=False),
        payload_rank=pl.coalesce(
            pl.col("text").str.extract(r"(?i)\[(?:GPU |global )?rank[: ]?\s*(\d+)(?:\s*/\s*\d+)?\](?:[^:]|$)"),
            pl.col("text").str.extract(r"^rank:\s+(\d+) \| "),  # ParlAI's distributed logger `rank:  3 | 2022-04-03 ...`
        ).cast(pl.Int32, strict=False),
        prefix_len=prefix.str.len_chars().fill_null(0),
    ).drop("_prefix", "_role")


def _resolve_ranks(lines: pl.LazyFrame, files: pl.DataFrame) -> pl.LazyFrame:
    """Rank per line: prefix tag, else the file's single tagged rank, else file name, else payload.

    A bare local rank is the last resort, only where the file shows no sign of several
    nodes: it equals the global rank on one node only.
    """
    per_file = pl.col("tag_rank").drop_nulls().unique().len().over("file")
    file_tag = pl.col("tag_rank").drop_nulls().first().over("file")
    # A per-rank file whose tagged lines all name one rank: its untagged lines are that rank's
    # too. Not so for a console log, where untagged lines may come from the launcher.
    per_rank_file = pl.col("name_rank").is_not_null() | pl.col("name_local").is_not_null()
    single_tag = pl.when((per_file == 1) & per_rank_file).then(file_tag)
    # torchrun's `[default3]:` is a local rank; learn local -> global from lines carrying both.
    # Several nodes in one console reuse local ranks: map only when the answer is unique.
    by_local = ["file", "tag_local"]
    unique_global = pl.col("tag_rank").drop_nulls().n_unique().over(by_local) == 1
    local_to_global = pl.when(pl.col("tag_local").is_not_null() & unique_global).then(
        pl.col("tag_rank").drop_nulls().first().over(by_local)
    )
    # A file whose known (local, global) pairs are all equal is a single node's: its bare local
    # ranks (prefix or torchrun --log-dir folder) are global ranks too. Any other pair, or no
    # pair at all in a file with global tags, and the bare local rank says nothing.
    both = pl.col("tag_local").is_not_null() & pl.col("tag_rank").is_not_null()
    identity = (pl.col("tag_local") == pl.col("tag_rank")).filter(both).all().over("file") & both.any().over("file")
    file_has_globals = pl.col("tag_rank").is_not_null().any().over("file")
    bare_local = pl.when(~file_has_globals | identity).then(pl.coalesce("tag_local", "name_local"))
    return lines.join(files.lazy(), on="file", how="left", maintain_order="left").with_columns(
        rank=pl.coalesce("tag_rank", local_to_global, single_tag, "name_rank", "payload_rank", bare_local).cast(pl.Int32),
        local_rank=pl.coalesce("tag_local", "name_local").cast(pl.Int32),
    )


def _blocks(lines: pl.LazyFrame) -> pl.LazyFrame:
    """`block` = first line of the traceback/stack a line belongs to (its own line otherwise).

    Untagged continuation lines (frames, and the exception line after them) right under a
    line that names its rank in its payload are that rank's: a logger that tags its record's
    first line (ParlAI's `rank:  3 | ... Traceback`) leaves the frames it logs bare. A launcher
    prefix alone passes nothing on (torchrun's failure table opens each entry with `[0]:`).
    """
    payload = pl.col("text").str.slice(pl.col("prefix_len"))
    stream = ["file", "stream_rank", "segment"]  # no block spans lines that condensing cut out
    in_file = ["file", "segment"]
    nonblank = payload.str.strip_chars() != ""
    # A frame's source line carries on too, even pasted without its indent; the exception line
    # that may follow a frame directly (`KeyError: 'x'`, `StopIteration`) does not.
    frame_above = (
        pl.when(nonblank).then(payload.str.contains(PYTHON_FRAME)).forward_fill().shift(1).over(in_file, order_by="line").fill_null(False)
    )
    source_line = frame_above & ~payload.str.contains(EXCEPTION_NAME)
    # A line that joins the record above: a frame, or the line after one (the exception line).
    joins = pl.col("cont") | pl.col("carries").shift(1).over(in_file, order_by="line").fill_null(False)
    record = [*in_file, "_record"]
    return (
        lines.with_columns(
            cont=payload.str.contains(CONTINUATION),
            carries=pl.when(nonblank).then(payload.str.contains(CARRIES_ON) | source_line).forward_fill().over(in_file, order_by="line"),
        )
        .with_columns(_joins=joins)
        .with_columns(_record=(~pl.col("_joins")).cum_sum().over(in_file, order_by="line"))
        .with_columns(
            rank=pl.when(pl.col("_joins"))
            .then(pl.col("rank").fill_null(pl.col("payload_rank").sort_by("line").first().over(record)))
            .otherwise("rank")
        )
        .drop("_joins", "_record")
        .with_columns(stream_rank=pl.col("rank").fill_null(-1))
        .with_columns(prev_carries=pl.col("carries").shift(1).over(stream, order_by="line").fill_null(False))
        .with_columns(
            block=pl.when(~pl.col("cont") & ~pl.col("prev_carries")).then(pl.col("line")).forward_fill().over(stream, order_by="line")
        )
        # A log that opens mid-traceback (a truncated paste, a rotated file): its first run of
        # frames belongs to one block starting at the stream's first line.
        .with_columns(pl.col("block").fill_null(pl.col("line").min().over(stream)))
    )


def _hosts(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Host per line: its own prefix, else the most common host of its (file, rank).

    A line's own host is its NCCL prefix `host:pid:tid [dev] NCCL`, else its pdsh
    `<host>: ` prefix when that name opens at least MIN_HOST_LINES lines of the file
    (a one-off `word1: ` is text, not a host). Lines without a prefix of their own take
    the (file, rank)'s most common host, ties to the smallest.
    """
    nccl = pl.col("text").str.extract(NCCL_HOST)
    pdsh = pl.col("text").str.extract("^" + HOST_PREFIX)
    frequent = pl.len().over("file", "_pdsh") >= MIN_HOST_LINES
    return (
        lines.with_columns(_pdsh=pdsh)
        .with_columns(_own=pl.coalesce(nccl, pl.when(pl.col("_pdsh").is_not_null() & frequent).then("_pdsh")))
        .with_columns(host=pl.coalesce("_own", pl.col("_own").drop_nulls().mode().min().over(["file", pl.col("rank").fill_null(-1)])))
        .drop("_pdsh", "_own")
    )


def read_text_files(
    root: Path, files: Iterable[TextFile], keep: Keep = WORDS_ONLY, metric_budget: int = METRIC_LINE_BUDGET
) -> tuple[pl.DataFrame, list[FileStatus], pl.DataFrame]:
    """Read text files into (LINES frame, per-file statuses, rank-conflict findings).

    Files are read in parallel, one per thread, and each is condensed as soon as it is read
    (`keep`: the catalog's literals), so memory holds a few whole files
    at a time and the condensed rest. All files share `metric_budget` metric lines.
    """
    items = list(files)
    metric_lines = metric_lines_per_file(len(items), metric_budget)
    with ThreadPoolExecutor(max_workers=max(1, min(len(items), pl.thread_pool_size()))) as pool:
        results = list(pool.map(lambda item: _file_frame(root, item, keep, metric_lines), items))
    frames = [frame for frame, _ in results]
    statuses = [status for _, status in results]
    if not items or all(f.is_empty() for f in frames):
        return empty(LINES), statuses, empty(FINDINGS)
    names = pl.DataFrame(
        {
            "file": [i.path for i in items],
            "name_rank": [i.rank for i in items],
            "name_local": [i.local_rank for i in items],
        },
        schema={"file": pl.String, "name_rank": pl.Int32, "name_local": pl.Int32},
    )
    raw = pl.concat(frames, how="vertical_relaxed")
    cleaned = (
        raw.lazy()
        .with_columns(pl.col("raw").str.replace_all(ANSI, "").str.replace_all(GLUED_PREFIX, "${1}\r${2}").str.split("\r"))
        .explode("raw")
        .rename({"raw": "text"})
        .filter(pl.col("text").str.strip_chars().str.len_chars() > 0)
    )
    year = infer_year(raw["raw"].head(200_000), fallback=_mtime_year(root, items))
    lines = _prefix_ranks(cleaned)
    lines = _resolve_ranks(lines, names)
    lines = _blocks(lines)
    lines = _hosts(lines).with_columns(time=line_time(pl.col("text"), year)).collect()
    conflicts = _rank_conflicts(lines)
    return conform(lines, LINES), statuses, conflicts


def _mtime_year(root: Path, items: list[TextFile]) -> int:
    import datetime as dt

    for item in items:
        try:
            return dt.datetime.fromtimestamp((root / item.path).stat().st_mtime, dt.UTC).year
        except OSError:
            continue
    return dt.datetime.now(dt.UTC).year


def _rank_conflicts(lines: pl.DataFrame) -> pl.DataFrame:
    """Files named for one rank whose prefixes consistently name another."""
    per_file = (
        lines.filter(pl.col("tag_rank").is_not_null() & pl.col("name_rank").is_not_null())
        .group_by("file")
        .agg(
            pl.col("name_rank").first(),
            pl.col("tag_rank").unique().alias("tags"),
            pl.col("line").first(),
            pl.col("text").first(),
        )
        .filter((pl.col("tags").list.len() == 1) & (pl.col("tags").list.first() != pl.col("name_rank")))
    )
    if per_file.is_empty():
        return empty(FINDINGS)
    return conform(
        per_file.with_columns(
            pattern=pl.lit("INPUT001"),
            title=pl.lit("File name and line prefixes disagree on the rank"),
            category=pl.lit("UNKNOWN"),
            severity=pl.lit("warning"),
            role=pl.lit("event"),
            rank=pl.col("tags").list.first(),
            captures=pl.format('{{"file_name_rank": {}, "prefix_rank": {}}}', pl.col("name_rank"), pl.col("tags").list.first()),
        ),
        FINDINGS,
    )
