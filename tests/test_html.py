"""`--format html`: the postmortem as one self-contained page, same content, inert against hostile log text."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from typer.testing import CliRunner

from forensics.cli import app
from forensics.report.html import render_html

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def test_the_page_has_every_section_and_every_figure_inline(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["analyze", str(INCIDENTS / "straggler_midrun"), "--out", str(out), "--format", "html"])
    assert result.exit_code == 0, result.output
    assert "postmortem.html" in result.output
    markdown = (out / "postmortem.md").read_text(encoding="utf-8")
    page = (out / "postmortem.html").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", markdown, flags=re.M)
    assert headings and re.findall(r"<h2>(.*?)</h2>", page) == headings
    images = [attrs["src"] for tag, attrs in _tags(page) if tag == "img"]
    figures = sorted((out / "figures").glob("*.png"))
    assert figures and len(images) == len(figures)
    assert all(src and src.startswith("data:image/png;base64,") for src in images)


def test_hostile_markdown_stays_text_and_loads_nothing_from_outside():
    hostile = "\n\n".join(
        [
            "# Postmortem",
            "<script>alert(1)</script>",
            '<img src="http://attacker.example/x.png" onerror="alert(2)">',
            "![beacon](http://attacker.example/beacon.png)",
            "[click](javascript:alert(3))",
            "| file | text |\n|---|---|\n| `a.log` | <iframe src=x> |",
        ]
    )
    page = render_html(hostile, 'evil "title" <b>')
    tags = _tags(page)
    assert not [tag for tag, _ in tags if tag in {"script", "iframe", "img"}]
    assert "attacker.example/beacon" not in page
    assert not [attrs for tag, attrs in tags if tag == "a" and "javascript" in str(attrs.get("href"))]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, not run
    assert "<title>evil &quot;title&quot; &lt;b&gt;</title>" in page
