"""Safe markdown building blocks: log text is hostile (backticks, pipes, HTML, markdown).

Table cells escape what would break the table or render as markup; quoted log lines go
in fenced blocks whose fence is longer than any backtick run inside them. Every helper
first makes text inert (`inert`): control characters and bidirectional overrides in a log
line would otherwise act on the terminal that shows the report (reset it, retitle the
window) or reorder what the reader sees (Trojan Source); they are shown as `\\u202e`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_CELL_ESCAPES = str.maketrans({"|": "\\|", "<": "&lt;", ">": "&gt;", "&": "&amp;", "\n": " ", "\r": " ", "`": "'"})
_MARKDOWN_SPECIALS = re.compile(r"([\\*_\[\]#~])")
_LIVE_PIPE = re.compile(r"(?<!\\)((?:\\\\)*)\|")  # after an even run of backslashes
MAX_CELL = 160
# C0 controls but tab, DEL, C1 controls, and the Unicode bidirectional controls.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def inert(value: object) -> str:
    """`value` as text with every control and bidi character shown as an escape (`\\x1b`, `\\u202e`)."""
    text = str(value)
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}" if ord(m.group()) > 0xFF else f"\\x{ord(m.group()):02x}", text)


def cell(value: object, limit: int = MAX_CELL) -> str:
    """A table cell: escaped, single line, cut at `limit` characters."""
    if value is None:
        return "—"
    text = inert(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    # Markdown specials first: escaping them after the table escapes would double the
    # backslash of `\|` into `\\|`, which renders a backslash and a live pipe.
    return _MARKDOWN_SPECIALS.sub(r"\\\1", text).translate(_CELL_ESCAPES)


# The cluster tools advice names, with their flags (`nvidia-smi -q -d ECC,ROW_REMAPPER`, `dmesg -T`).
_COMMAND = (
    r"(?:nvidia-smi|dmesg|ibstatus|ibstat|ibv_devinfo|py-spy dump|journalctl|dcgmi diag|lspci|ulimit)"
    r"(?: -{1,2}[A-Za-z][\w-]*(?: (?:[A-Z][A-Z_,]*[A-Z]|\d+)\b)?)*(?![\w/-])"
)
# Tokens a reader pastes: ENV=value settings (`NCCL_DEBUG_SUBSYS=INIT,NET`), identifiers with an underscore
# or a dotted path, the commands above, and sequence numbers (`#1183`, which a markdown escape would turn into `\#1183`).
_PASTABLE = re.compile(
    r"(?<![\w`])(?:(?<!-)"
    + _COMMAND
    + r"|#\d+\b|[A-Z][A-Z0-9_]*=[^\s;()]+?(?=[\s;()]|[,.]?(?:\s|$))|[A-Za-z_][\w]*(?:[._][\w]+)*_[\w.]*(?:\([^()\s]*\)|=[^\s,;()]+)?)(?![\w`])"
)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def prose(value: object, limit: int = 400) -> str:
    """A sentence of advice: markdown-safe, with commands and identifiers as code spans.

    Backtick spans in the text stay code; bare `ENV=value` settings, identifiers with
    underscores and the cluster tools' commands with their flags (_COMMAND) become code spans
    too, so they paste exactly (never `expandable\\_segments`).
    """
    text = inert(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    out, last = [], 0
    for span in _CODE_SPAN.finditer(text):
        out.append(_pastable(text[last : span.start()]))
        out.append(code(span.group(2)))
        last = span.end()
    out.append(_pastable(text[last:]))
    return "".join(out)


def _pastable(text: str) -> str:
    parts, last = [], 0
    for token in _PASTABLE.finditer(text):
        parts.append(cell(text[last : token.start()], len(text) + 1) if token.start() > last else "")
        parts.append(code(token.group()))
        last = token.end()
    if last < len(text):
        parts.append(cell(text[last:], len(text) + 1))
    return "".join(parts)


def code(value: object) -> str:
    """Inline code that survives backticks in the text."""
    text = inert(str(value).replace("\n", " "))
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def code_block(lines: Iterable[str], language: str = "text") -> str:
    body = "\n".join(inert(line) for line in lines)
    longest = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{body}\n{fence}"


def _table_cell(value: object) -> str:
    # GFM splits a row at every unescaped pipe, even inside a code span: a quoted Megatron
    # line (`iteration 5/ 10 | lm loss: ...`) would spill into the next columns.
    return _LIVE_PIPE.sub(r"\1\\|", str(value).replace("\n", " "))


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_table_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def where(file: str | None, line: int | None) -> str:
    """`file:line` citation (file alone when the evidence has no line)."""
    if file is None:
        return "—"
    return code(f"{file}:{line}" if line is not None else file)


def plural(count: int, noun: str) -> str:
    """`1 file`, `3 files`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def duration(seconds: float) -> str:
    """42 -> '42 s', 750 -> '12 min', 9000 -> '2 h 30 min'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def ranges(values: Iterable[int]) -> str:
    """[0,1,2,3,7,9,10] -> '0-3, 7, 9-10': how 1,024 ranks fit in one cell."""
    ordered = sorted(set(values))
    parts: list[str] = []
    start = prev = None
    for v in ordered:
        if start is None:
            start = prev = v
        elif v == prev + 1:
            prev = v
        else:
            parts.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = v
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else str(start))
    return ", ".join(parts)
