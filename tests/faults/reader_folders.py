"""Hostile copies of a real examples output, for the reader's fault tests (``test_reader_*.py``).

Each helper edits one thing and then rebuilds what a careful forger would so that the integrity
checks pass — the index's reference in the manifest (size, SHA-256), the shard's entries in the
index and the manifest, ``COMPLETED`` — leaving only the check under test to catch the edit.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
from click.testing import CliRunner

from schemas import completed_marker
from schemas.index import shard_index_entry
from tests.clis import CLIS

TINY = "--config tiny --global-batch-size 8 --max-steps 2 --precision fp32 --num-workers 0"


def copy_output(shards: Path, folder: Path) -> Path:
    """A copy of the examples output ``shards`` at ``folder``."""
    shutil.copytree(shards, folder)
    return folder


def load(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def rewrite(
    folder: Path,
    index: Callable[[dict], object] | None = None,
    manifest: Callable[[dict], object] | None = None,
    index_text: str | None = None,
) -> None:
    """Apply ``index`` to the JSON of ``index.json`` (or write ``index_text`` instead) and
    ``manifest`` to that of ``manifest.json``, then make the manifest name the new index and
    ``COMPLETED`` match the manifest."""
    if index is not None:
        data = load(folder, "index.json")
        index(data)
        index_text = json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"
    data = load(folder, "manifest.json")
    if manifest is not None:
        manifest(data)
    if index_text is not None:
        (folder / "index.json").write_text(index_text)
        raw = index_text.encode()
        data["index"] = {
            "path": "index.json",
            "num_bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
    text = json.dumps(data, sort_keys=True, indent=2) + "\n"
    (folder / "manifest.json").write_text(text)
    (folder / "COMPLETED").write_text(completed_marker(text))


def rewrite_rows(folder: Path, edit: Callable[[list[dict]], None]) -> None:
    """Apply ``edit`` to the rows of every record batch of every shard (in place, as dicts),
    re-encode the shards, and rebuild their index entries, manifest entries and ``COMPLETED``."""
    manifest = load(folder, "manifest.json")
    index = load(folder, "index.json")
    for shard in manifest["shards"]:
        path = folder / shard["path"]
        reader = ipc.open_file(pa.py_buffer(path.read_bytes()))
        sink = io.BytesIO()
        with ipc.new_file(sink, reader.schema) as writer:
            for k in range(reader.num_record_batches):
                rows = reader.get_batch(k).to_pylist()
                edit(rows)
                writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=reader.schema))
        blob = sink.getvalue()
        path.write_bytes(blob)
        entry, _ = shard_index_entry(shard["path"], blob)
        shard.update(num_bytes=len(blob), sha256=entry.sha256, num_rows=entry.num_rows)
        indexed = next(s for s in index["shards"] if s["path"] == shard["path"])
        indexed.update(num_bytes=len(blob), sha256=entry.sha256)
        indexed["batches"] = {key: [getattr(b, key) for b in entry.batches] for key in indexed["batches"]}
    rewrite(folder, index=lambda data: data.update(index), manifest=lambda data: data.update(manifest))


def run(program: str, *args: str) -> tuple[int, str]:
    """Run a command in-process: its exit code and its one line (asserting there is one, and no
    traceback)."""
    result = CliRunner().invoke(CLIS[program], list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip() and " WARNING " not in line]
    assert "Traceback" not in result.output and len(lines) == 1, result.output
    return result.exit_code, lines[0]


def pretrain(folder: Path, output: Path) -> tuple[int, str]:
    """``pretrain`` on the shards at ``folder`` (a tiny BERT, 2 steps, --quiet): exit code, line."""
    return run("pretrain", "--shards", str(folder), *TINY.split(), "--output", str(output), "--quiet")
