"""`pipelines wikipedia` end to end on the real enwiki excerpt (206 pages: 106 articles, 100 redirects)."""

from __future__ import annotations

import bz2
import json
import shutil

import pytest

from tests.conftest import ENWIKI_EXCERPT, require
from tests.e2e.conftest import FAST_RUNNER, read_output, read_rejects, run_cli, shard_bytes
from tests.multistream import build_multistream

pytestmark = pytest.mark.slow

MARKUP = ("{{", "}}", "[[", "]]", "<ref", "{|", "|}", "&nbsp;", "thumb|", "Category:", "File:")
BAD_STARTS = ("=", "*", "#", "|", "!")


def test_counts_reconcile_with_the_dump(wiki_output):
    _, stats, tables = read_output(wiki_output)
    assert stats["records_in"] == 206
    assert stats["dropped"]["redirect"] == 100
    disambiguation = stats["dropped"]["disambiguation"]
    assert disambiguation >= 1
    articles_out = (
        106
        - disambiguation
        - sum(n for reason, n in stats["dropped"].items() if reason not in ("redirect", "disambiguation"))
        - sum(stats["rejected"].values())
    )
    assert stats["documents_out"] == articles_out == tables["all"].num_rows
    assert stats["reconciles"] and not stats["file_errors"]
    assert stats["sentences"] == sum(tables["all"].column("num_sentences").to_pylist())


def test_no_markup_survives_in_any_sentence(wiki_output):
    _, _, tables = read_output(wiki_output)
    offending = [
        s
        for doc in tables["all"].column("sentences").to_pylist()
        for s in doc
        if any(m in s for m in MARKUP) or s.startswith(BAD_STARTS)
    ]
    assert offending == []


def test_page_metadata_is_kept(wiki_output):
    _, _, tables = read_output(wiki_output)
    rows = {
        r["title"]: r for r in tables["all"].select(["title", "page_id", "revision_id", "source"]).to_pylist()
    }
    assert all(r["page_id"] and r["revision_id"] and r["source"] == "wikipedia" for r in rows.values())
    assert "AccessibleComputing" not in rows  # page 10 is a redirect


def test_two_worker_processes_write_identical_bytes(wiki_output, tmp_path):
    dump = require(ENWIKI_EXCERPT)
    out = tmp_path / "two"
    run_cli(
        "wikipedia",
        "--input",
        str(dump),
        "--output",
        str(out),
        "--num-shards",
        "4",
        "--runner",
        "DirectRunner",
        "--direct_num_workers",
        "2",
        "--direct_running_mode",
        "multi_processing",
    )
    assert shard_bytes(out) == shard_bytes(wiki_output)
    assert (out / "manifest.json").read_text() == (wiki_output / "manifest.json").read_text()
    assert (out / "stats.json").read_text() == (wiki_output / "stats.json").read_text()


def test_multistream_ranges_give_the_same_documents(wiki_output, tmp_path):
    dump, index = build_multistream(require(ENWIKI_EXCERPT), tmp_path / "ms", pages_per_stream=10)
    out = tmp_path / "out"
    run_cli(
        "wikipedia",
        "--input",
        str(dump),
        "--output",
        str(out),
        "--num-shards",
        "4",
        "--streams-per-range",
        "3",
        *FAST_RUNNER,
    )
    _, stats, tables = read_output(out)
    _, whole_stats, whole = read_output(wiki_output)
    columns = ["doc_id", "title", "page_id", "revision_id", "sentences"]
    assert tables["all"].select(columns).to_pylist() == whole["all"].select(columns).to_pylist()
    assert stats["dropped"] == whole_stats["dropped"]


def test_a_truncated_dump_keeps_what_it_read_and_says_so(tmp_path):
    data = require(ENWIKI_EXCERPT).read_bytes()
    cut = tmp_path / "cut.xml.bz2"
    cut.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    result = run_cli("wikipedia", "--input", str(cut), "--output", str(out), *FAST_RUNNER, expect=1)
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith(f"error: --output {out}: not marked COMPLETED: {cut}: ")
    assert "pages before it were kept" in error and error.endswith(
        "--allow-file-errors keeps what was read before each error"
    )
    assert not (out / "COMPLETED").exists() and not (out / "manifest.json").exists()
    assert json.loads((out / "stats.json").read_text())["file_errors"] == {"truncated_input": 1}
    refused = run_cli("corpus", "--input", str(out), "--output", str(tmp_path / "corpus"), expect=1)
    assert "no COMPLETED marker" in refused.output and "Traceback" not in refused.output
    # Accepted explicitly, the pages before the cut make a complete output.
    args = ("--input", str(cut), "--output", str(out), "--allow-file-errors", "--overwrite", *FAST_RUNNER)
    result = run_cli("wikipedia", *args)
    assert "warning: 1 input file(s) ended early (truncated_input)" in result.output
    assert (out / "COMPLETED").exists()
    _, stats, tables = read_output(out)
    assert stats["file_errors"] == {"truncated_input": 1} and stats["reconciles"]
    assert 0 < stats["records_in"] < 206 and tables["all"].num_rows > 0
    (reject,) = read_rejects(out)
    assert reject["origin"].endswith("cut.xml.bz2") and reject["reason"] == "truncated_input"
    assert "pages before it were kept" in reject["detail"]


def test_malformed_xml_is_a_file_error_naming_the_file(tmp_path):
    xml = bz2.decompress(require(ENWIKI_EXCERPT).read_bytes()).decode("utf-8")
    position = xml.index("</page>", len(xml) // 2)
    broken = tmp_path / "broken.xml"
    broken.write_text(xml[:position] + xml[position + len("</page>") :], encoding="utf-8")
    out = tmp_path / "out"
    run_cli("wikipedia", "--input", str(broken), "--output", str(out), *FAST_RUNNER, expect=1)
    assert not (out / "COMPLETED").exists()
    (reject,) = read_rejects(out)
    assert reject["reason"] == "malformed_xml" and reject["origin"].endswith("broken.xml")


def test_a_glob_matching_nothing_fails_before_running(tmp_path):
    result = run_cli(
        "wikipedia", "--input", str(tmp_path / "nothing-*.bz2"), "--output", str(tmp_path / "o"), expect=1
    )
    assert "no file matches this path or pattern" in result.output
    assert not (tmp_path / "o").exists()


def test_a_completed_output_is_refused_unless_overwritten(wiki_output, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(wiki_output, out)
    dump = str(require(ENWIKI_EXCERPT))
    result = run_cli("wikipedia", "--input", dump, "--output", str(out), *FAST_RUNNER, expect=1)
    assert "of a completed `pipelines wikipedia` run" in result.output and "pass --overwrite" in result.output


def test_an_unwritable_output_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = run_cli(
        "wikipedia",
        "--input",
        str(require(ENWIKI_EXCERPT)),
        "--output",
        str(blocker / "out"),
        *FAST_RUNNER,
        expect=1,
    )
    assert result.output.startswith(f"error: --output {blocker / 'out'}: cannot write there")
