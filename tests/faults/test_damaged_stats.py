"""A damaged ``stats.json`` of a completed documents output: ``pipelines show`` says so in one line
naming the file (exit 1), never a traceback."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import FAST_RUNNER, run_cli


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    root = tmp_path_factory.mktemp("show")
    (root / "in.txt").write_text("One sentence here.\nAnother one.\n\nA second document.\n")
    run_cli("text", "--input", str(root / "in.txt"), "--output", str(root / "out"), *FAST_RUNNER)
    return root / "out"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "a list where a JSON object is expected"),
        ('{"sentences": "3", "words": 5, "dropped": {}, "rejected": {}}', "the field 'sentences' is a str"),
    ],
)
def test_pipelines_show_names_a_damaged_stats_json(documents, content, message):
    stats = documents / "stats.json"
    good = stats.read_text()
    try:
        stats.write_text(content)
        result = run_cli("show", str(documents), expect=1)
    finally:
        stats.write_text(good)
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {stats}: {message}")
    assert "Traceback" not in result.output
    assert run_cli("show", str(documents)).output.startswith(f"{documents}: pipelines text, ")
