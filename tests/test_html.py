"""`--format html`: the postmortem as one self-contained page, same content, inert against hostile log text."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
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


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _screenshot(browser: str, page: Path, shot: Path, height: int) -> object:
    """The page as a headless browser paints it (an RGB(A) array)."""
    from matplotlib.image import imread

    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--window-size=1200,{height}",
        f"--screenshot={shot}",
        page.as_uri(),
    ]
    subprocess.run(command, capture_output=True, timeout=120, check=True)
    return imread(shot)


def _inked(pixels: object) -> float:
    """The share of pixels that are not near-white."""
    return float((pixels[..., :3].min(axis=-1) < 0.9).mean())


def test_a_real_browser_paints_the_page_and_its_inline_figures(tmp_path):
    browser = next((b for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no headless Chromium on this machine (apt-get install chromium to run this check)")
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["analyze", str(INCIDENTS / "straggler_midrun"), "--out", str(out), "--format", "html"]).exit_code == 0
    page = (out / "postmortem.html").read_text(encoding="utf-8")
    assert _inked(_screenshot(browser, out / "postmortem.html", tmp_path / "page.png", 1600)) > 0.02
    # The figures alone, under the report's own Content-Security-Policy: they decode and paint.
    head = page[: page.index("</head>")] + "</head><body>"
    images = re.findall(r'<img [^>]*src="data:image/png;base64,[^"]+"[^>]*>', page)
    assert images
    figures_page = tmp_path / "figures.html"
    figures_page.write_text(head + "".join(images) + "</body></html>", encoding="utf-8")
    painted = _inked(_screenshot(browser, figures_page, tmp_path / "figures.png", 2400))
    broken_page = tmp_path / "broken.html"
    broken_page.write_text(
        head + "".join(re.sub(r"base64,[A-Za-z0-9+/]{200}", "base64,AAAA", img) for img in images) + "</body></html>", encoding="utf-8"
    )
    broken = _inked(_screenshot(browser, broken_page, tmp_path / "broken.png", 2400))
    assert painted > 0.03 and broken < painted / 10, (painted, broken)
