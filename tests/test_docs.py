"""docs/ is generated from the code; a change to the CLI, the catalog or a frame fails here
until `python -m forensics.docs` is run again."""

from __future__ import annotations

from forensics import docs


def test_generated_docs_are_up_to_date():
    assert docs.stale() == [], "run: python -m forensics.docs"


def test_the_docs_cover_every_command_frame_and_catalog_id():
    from forensics.catalog import load_full
    from forensics.schema import FRAME_DOCS

    rendered = docs.render_all()
    for command in ("forensics analyze", "forensics batch", "forensics traces", "forensics patterns test"):
        assert f"## `{command}`" in rendered["cli.md"]
    assert "`--patterns`" in rendered["cli.md"]
    for name in FRAME_DOCS:
        assert f"## {name}\n" in rendered["frames.md"]
    catalog = load_full()
    for entry in [*catalog.patterns, *catalog.derived]:
        assert f"## {entry.id}: " in rendered["patterns.md"]
    assert "| `verdict.culprit_ranks` | array |" in rendered["verdict.md"]


def test_a_changed_doc_is_reported_stale(tmp_path):
    for name, text in docs.render_all().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert docs.stale(tmp_path) == []
    (tmp_path / "frames.md").write_text("edited by hand\n", encoding="utf-8")
    assert docs.stale(tmp_path) == ["frames.md"]


def test_the_readme_example_is_what_the_tool_writes(tmp_path):
    import re

    from forensics.flow import analyze
    from forensics.report.markdown import render_markdown

    readme = (docs.REPO / "README.md").read_text(encoding="utf-8")
    excerpt = re.search(r"## An example.*?```markdown\n(.*?)```", readme, re.S).group(1)
    postmortem = render_markdown(analyze(docs.REPO / "fixtures" / "incidents" / "gpu_thermal_straggler"))
    assert postmortem.startswith(excerpt), "README's example no longer matches: paste the new postmortem head"
    assert (docs.REPO / "docs" / "img" / "gpu_thermal_straggler.png").is_file()
