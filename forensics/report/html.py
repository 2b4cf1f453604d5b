"""The postmortem as one self-contained HTML file, for ticket systems that do not render markdown.

Enters: the markdown postmortem (report/markdown.py) and the figures this run drew. Leaves:
one HTML document with the same content, each figure inlined as a `data:` PNG. Assumed: the
markdown is this tool's own, whose log text markup.py already made inert. The HTML is safe
on its own too: raw HTML in the markdown is shown as text, never passed through; an image
whose source is not one of this run's figures is dropped; and a Content-Security-Policy
forbids scripts and every load from outside the file.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape
from pathlib import Path

from markdown_it import MarkdownIt

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; color: #1b1f24; }
code, pre { font: 13px/1.4 ui-monospace, monospace; background: #f3f4f6; }
code { padding: 0 .2em; } pre { padding: .6rem; overflow-x: auto; white-space: pre; }
table { border-collapse: collapse; margin: .5rem 0; } th, td { border: 1px solid #d0d7de; padding: .2rem .5rem; text-align: left; vertical-align: top; }
img { max-width: 100%; }
"""
POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def render_html(markdown: str, title: str, figures: Sequence[Path] = ()) -> str:
    """`markdown` as a standalone HTML page titled `title`, with `figures` (paths whose names the markdown cites as `figures/NAME`) inlined."""
    inline = {f"figures/{path.name}": _data_uri(path) for path in figures}
    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = parser.parse(markdown)
    for token in tokens:
        for child in token.children or []:
            if child.type == "image":
                source = inline.get(str(child.attrGet("src")))
                if source is None:
                    child.type, child.tag, child.content, child.children = "text", "", "", []
                else:
                    child.attrSet("src", source)
    body = parser.renderer.render(tokens, parser.options, {})
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    )


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
