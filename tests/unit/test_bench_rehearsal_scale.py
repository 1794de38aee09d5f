"""benchmarks/rehearsal_scale.py: a worker's memory is its own process tree's, an output is compared
by its shards' checksums and not by the paths its parameters name, and the stages run scale.py's
command lines over the bucket."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks import rehearsal_scale as rs
from schemas.manifest import Manifest, ShardEntry

POOL = 10
CHILDREN = {1: [POOL, 20], POOL: [11, 12], 11: [13], 13: [14], 12: [], 20: [21]}
RSS = {1: 5, POOL: 100, 11: 1000, 12: 2000, 13: 30, 14: 4, 20: 70, 21: 7}


def test_each_worker_is_its_own_tree_summed_and_the_pool_itself_is_left_out():
    assert rs.tree_rss(CHILDREN, RSS, 11) == 1034
    assert rs.child_trees_rss(CHILDREN, RSS, POOL) == {11: 1034, 12: 2000}
    assert rs.tree_rss(CHILDREN, RSS, 1) == sum(RSS.values())
    assert rs.tree_rss(CHILDREN, RSS, 99) == 0  # a process gone: nothing
    assert rs.tree_rss({1: [2], 2: [1]}, {1: 3, 2: 4}, 1) == 7  # a cycle from a reused pid ends


def test_the_peaks_of_real_child_trees_are_sampled_per_child_and_an_ended_one_is_not_a_worker():
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(200 << 20); import time; time.sleep(30)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for: a zombie
    try:
        time.sleep(1.5)
        peaks = rs.Peaks(os.getpid(), {})
        peaks.sample()
        assert peaks.workers[child.pid] > 200e6  # the child is one "worker" of this process
        assert ended.pid not in peaks.workers
        with rs.Peaks(os.getpid(), {}) as later:  # a block started after the child: not its worker
            time.sleep(2 * rs.SAMPLE_S)
            assert child.pid not in later.workers and later.found["submitter"] > 200e6
    finally:
        child.kill()
        child.wait()
        ended.wait()


def _manifest(sha: str, inputs: str) -> bytes:
    shard = ShardEntry("train/part-00000.arrow", "documents", "train", 3, 100, sha)
    return Manifest("documents", 1, "pipelines corpus", {"inputs": [inputs]}, (shard,)).to_json().encode()


def test_outputs_are_equal_by_their_shards_whatever_inputs_their_parameters_name():
    a, b = "a" * 64, "b" * 64
    local = rs.output_content({"manifest.json": _manifest(a, "/tmp/out/wiki")}, "local")
    same = rs.output_content({"manifest.json": _manifest(a, "gs://b/wiki")}, "b")
    assert rs.differing(local, same) == []
    other = rs.output_content({"manifest.json": _manifest(b, "/tmp/out/wiki")}, "b")
    assert rs.differing(local, other) == ["train/part-00000.arrow"]
    vocab = rs.output_content({"vocab.txt": b"[PAD]\n"}, "v")
    assert rs.differing(vocab, rs.output_content({"vocab.txt": b"[PAD]\na\n"}, "v")) == ["vocab.txt"]


def _shard(origins: list[str], titles: list[str]) -> bytes:
    import pyarrow as pa

    schema = pa.schema([pa.field("title", pa.string()), pa.field("origin", pa.string(), nullable=False)])
    table = pa.table({"title": titles, "origin": origins}, schema=schema)  # as the shards' schema is
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_shards_are_the_same_rows_when_only_the_inputs_location_differs():
    moved = {"/tmp/in/": "gs://b/in/"}
    ours = _shard(["gs://b/in/wiki/a.bz2", "gs://b/in/books/b.txt"], ["A", "B"])
    assert rs.same_rows(ours, _shard(["/tmp/in/wiki/a.bz2", "/tmp/in/books/b.txt"], ["A", "B"]), moved)
    assert not rs.same_rows(ours, _shard(["/tmp/in/wiki/a.bz2", "/tmp/in/books/b.txt"], ["A", "C"]), moved)
    assert not rs.same_rows(ours, _shard(["/tmp/in/wiki/a.bz2", "/tmp/in/books/c.txt"], ["A", "B"]), moved)
    assert not rs.same_rows(ours, _shard(["/tmp/other/wiki/a.bz2", "/tmp/in/books/b.txt"], ["A", "B"]), moved)


def test_the_stages_are_scale_py_command_lines_over_the_bucket():
    args = rs.stage_args("examples", "gs://rehearsal/x")
    assert args[0] == "examples" and args[args.index("--output") + 1] == "gs://rehearsal/x"
    assert args[args.index("--corpus") + 1] == f"{rs.FOLDER}/out/corpus"
    assert args[args.index("--vocab") + 1] == f"{rs.FOLDER}/out/vocab/vocab.txt"
    assert ("--dupe-factor", "5") == tuple(args[args.index("--dupe-factor") :][:2])
    assert args[args.index("--spill") + 1] == "always"  # the job service's shuffle is in memory
    assert rs.stage_args("wordpiece", "gs://rehearsal/v")[:3] == [
        "train",
        "--corpus",
        f"{rs.FOLDER}/out/corpus",
    ]
    wiki = rs.stage_args("wikipedia", "gs://rehearsal/w")
    assert wiki[wiki.index("--input") + 1] == f"{rs.FOLDER}/input/wiki/*-multistream.xml.bz2"


def test_an_input_that_is_not_a_scale_corpus_is_refused_in_one_line(tmp_path):
    assert "no scale_corpus.json" in rs.check_folders(tmp_path, None, list(rs.STAGES))
    (tmp_path / "scale_corpus.json").write_text("{}")
    (tmp_path / "wiki").mkdir()
    (tmp_path / "books").mkdir()
    assert "no wiki/*-multistream.xml.bz2" in rs.check_folders(tmp_path, None, list(rs.STAGES))
    (tmp_path / "wiki" / "x-multistream.xml.bz2").write_bytes(b"")
    assert rs.check_folders(tmp_path, None, list(rs.STAGES)) is None
    assert "wiki is not a completed output" in rs.check_folders(tmp_path, tmp_path, ["wikipedia"])
