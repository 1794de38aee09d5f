"""Values no writer makes, in shards whose index, manifest and hashes were rebuilt to match them
(``reader_folders.rewrite_rows``): each record batch is checked as it is decoded, and a bad one
is one line naming the shard, the record batch and the row (``pretrain``: exit 1, no traceback,
before the model sees it)."""

from __future__ import annotations

import hashlib
import re

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from pretrain.data import ExampleShards
from schemas.commands import InputError
from schemas.index import shard_index_entry
from tests.faults.reader_folders import copy_output, load, pretrain, rewrite, rewrite_rows

VOCAB_SIZE = 30522  # the released bert-base-uncased vocabulary the shards were made with
ROW = 3  # the row edited in every record batch


def _edit(field: str, value):
    """An edit of row ROW of every record batch: ``field`` set to ``value(row)``."""

    def edit(rows: list[dict]) -> None:
        rows[ROW][field] = value(rows[ROW])

    return edit


CASES = {
    "token id beyond the vocabulary": (
        _edit("input_ids", lambda r: [r["input_ids"][0], 30600, *r["input_ids"][2:]]),
        "input_ids holds token id 30600, not below the vocabulary's 30522 tokens",
    ),
    "masked id beyond the vocabulary": (
        _edit("masked_lm_ids", lambda r: [65535] * len(r["masked_lm_ids"])),
        "masked_lm_ids holds token id 65535, not below the vocabulary's 30522 tokens",
    ),
    "masked position beyond the sequence": (
        _edit("masked_lm_positions", lambda r: [*r["masked_lm_positions"][:-1], r["num_tokens"] + 3]),
        "masked_lm_positions holds {n3}, outside the row's {n} tokens",
    ),
    "negative masked position": (
        _edit("masked_lm_positions", lambda r: [-2, *r["masked_lm_positions"][1:]]),
        "masked_lm_positions holds -2, outside the row's {n} tokens",
    ),
    "masked positions repeated": (
        _edit("masked_lm_positions", lambda r: [r["masked_lm_positions"][1], *r["masked_lm_positions"][1:]]),
        "masked_lm_positions are not strictly ascending",
    ),
    "fewer masked ids than positions": (
        _edit("masked_lm_ids", lambda r: r["masked_lm_ids"][:-1]),
        "{m} masked_lm_positions but another number of masked_lm_ids",
    ),
    "NSP label 5": (_edit("next_sentence_labels", lambda r: 5), "next_sentence_labels 5 is not 0 or 1"),
    "segment boundary beyond the sequence": (
        _edit("num_tokens_a", lambda r: r["num_tokens"] + 1),
        "num_tokens_a {n1} lies outside 0..num_tokens",
    ),
    "length that is not the tokens'": (
        _edit("num_tokens", lambda r: r["num_tokens"] - 1),
        "input_ids holds {k} tokens, num_tokens says otherwise",
    ),
    "sequence longer than the shards'": (
        lambda rows: rows[ROW].update(
            input_ids=rows[ROW]["input_ids"] * 2, num_tokens=2 * rows[ROW]["num_tokens"]
        ),
        "num_tokens {n} exceeds the shards' max_seq_length 64",
    ),
    "empty sequence": (
        lambda rows: rows[ROW].update(
            input_ids=[], num_tokens=0, num_tokens_a=0, masked_lm_positions=[], masked_lm_ids=[]
        ),
        "num_tokens 0 is below 1",
    ),
    "null token": (
        _edit("input_ids", lambda r: [r["input_ids"][0], None, *r["input_ids"][2:]]),
        "input_ids holds a null",
    ),
}


def _expected(folder, text: str, message: str) -> str:
    """``text`` with the figures of the edited row of the record batch that ``message`` names."""
    shard, batch = re.search(r"/(examples/[^:]+\.arrow): record batch (\d+):", message).groups()
    reader = ipc.open_file(pa.py_buffer((folder / shard).read_bytes()))
    row = reader.get_batch(int(batch)).slice(ROW, 1).to_pylist()[0]
    n, k, m = row["num_tokens"], len(row["input_ids"]), len(row["masked_lm_positions"])
    return text.format(n=n, n1=n + 1, n3=n + 3, k=k, m=m)


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_value_is_one_line_naming_shard_batch_and_row(shards, tmp_path, name):
    folder = copy_output(shards, tmp_path / "out")
    edit, text = CASES[name]
    rewrite_rows(folder, edit)
    reader = ExampleShards(str(folder), batch_size=8, vocab_size=VOCAB_SIZE)
    with pytest.raises(InputError) as caught:
        next(iter(reader))
    message = str(caught.value)
    pattern = (
        rf"{re.escape(str(folder))}/examples/part-0000[01]-of-00002\.arrow: record batch \d: row {ROW}: "
        + re.escape(_expected(folder, text, message))
        + r"; the output does not hold what `pipelines examples` writes \(for this vocabulary\): regenerate it"
    )
    assert re.fullmatch(pattern, message), message


@pytest.mark.parametrize(
    "name", ["token id beyond the vocabulary", "masked position beyond the sequence", "NSP label 5"]
)
def test_pretrain_stops_at_a_bad_value_with_one_line(shards, tmp_path, name):
    """The issue's cases through the command: one line, exit 1, nothing trained on."""
    folder = copy_output(shards, tmp_path / "out")
    edit, text = CASES[name]
    rewrite_rows(folder, edit)
    code, line = pretrain(folder, tmp_path / "run")
    assert code == 1 and line.startswith(f"error: {folder}/examples/part-0000"), line
    assert _expected(folder, text, line) in line and "stopped at step 0" in line, line
    assert not list((tmp_path / "run").glob("checkpoints/*/COMMITTED"))


def test_unchecked_without_a_vocabulary_size_but_the_id_type(shards, tmp_path):
    """A reader given no vocabulary size checks ids only by their type; the trainer always gives it."""
    folder = copy_output(shards, tmp_path / "out")
    rewrite_rows(folder, CASES["token id beyond the vocabulary"][0])
    assert len(list(ExampleShards(str(folder), batch_size=512))) > 0


def test_malformed_arrow_offsets_are_one_line(shards, tmp_path):
    """A record batch whose list offsets go backwards (it decodes; only a full validation sees
    it), hashes matched: one line, not a crash in the collate."""
    folder = copy_output(shards, tmp_path / "out")
    manifest, index = load(folder, "manifest.json"), load(folder, "index.json")
    for shard, indexed in zip(
        manifest["shards"], sorted(index["shards"], key=lambda s: s["path"]), strict=True
    ):
        path = folder / shard["path"]
        table = ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema) as writer:  # uncompressed: the offsets are plain bytes
            writer.write_table(table, max_chunksize=1024)
        blob = sink.getvalue().to_pybytes()
        offsets = table.column("input_ids").chunk(0).offsets.to_numpy()[: ROW + 3]
        bad = offsets.copy()
        bad[ROW + 1] = bad[ROW + 2] + 1  # row ROW ends after row ROW + 1 does
        assert blob.count(offsets.tobytes()) >= 1
        blob = blob.replace(offsets.tobytes(), bad.tobytes(), 1)
        path.write_bytes(blob)
        entry, _ = shard_index_entry(shard["path"], blob)
        shard.update(num_bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
        indexed.update(num_bytes=len(blob), sha256=entry.sha256)
        indexed["batches"] = {key: [getattr(b, key) for b in entry.batches] for key in indexed["batches"]}
    rewrite(folder, index=lambda data: data.update(index), manifest=lambda data: data.update(manifest))
    with pytest.raises(InputError, match=r"record batch 0: malformed Arrow data \(.*non-monotonic offset"):
        next(iter(ExampleShards(str(folder), batch_size=8, vocab_size=VOCAB_SIZE, shuffle=False)))


def test_the_checks_pass_every_real_record_batch(shards):
    """Every record batch `pipelines examples` wrote passes (and the check costs little)."""
    reader = ExampleShards(str(shards), batch_size=64, vocab_size=VOCAB_SIZE)
    assert sum(len(b["input_ids"]) for b in reader) == reader.world_size * reader.streams * reader.stream_rows
