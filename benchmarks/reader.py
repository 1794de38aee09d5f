"""The trainer's reader (``pretrain.data.ExampleShards``): examples/s from local disk and from a bucket.

    python benchmarks/reader.py [--shards FOLDER] [--examples 200000] [--batch-size 256]

Input: ``--shards`` (a ``pipelines examples`` output), or by default synthetic shards written with
the examples schema: ``--examples`` examples whose lengths follow the reference generator's
(90% at max_seq_length 128, 10% shorter) with Zipf-distributed token ids of a 30,522 vocabulary,
20 masks each, 16 shards, zstd, 1,024 rows per record batch.

Measured on one core (the reader's own thread plus its prefetch thread; ``torch`` limited to one
thread), one epoch each, after the SHA-256 checks (first pass excluded from the rate):
- ours from local disk: shuffled order, ranged reads, prefetch, padded int64 tensors;
- ours with dynamic re-masking in the collate;
- ours from ``gs://`` on a local GCS emulator (``gcp-storage-emulator``, in-memory; a Python
  server, so this is a lower bound for a real bucket);
- peer: a plain sequential ``pyarrow.dataset`` scan of the same files feeding the same collate
  (no shuffle, no checks): what reading Arrow files costs at best.
Results go to ``benchmarks/results/reader.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import numpy as np  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402
import pyarrow.ipc as ipc  # noqa: E402
import torch  # noqa: E402

from pretrain.collate import DynamicMasking, collate  # noqa: E402
from pretrain.data import ExampleShards  # noqa: E402
from schemas import Manifest, ShardEntry, completed_marker  # noqa: E402
from schemas.examples import EXAMPLES_VERSION, examples_format  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "reader.json"
VOCAB_SIZE = 30522


def synthetic_shards(folder: Path, examples: int, shards: int = 16, seed: int = 0) -> None:
    """Write ``examples`` synthetic examples as a completed examples output in ``folder``."""
    rng = np.random.default_rng(seed)
    fmt = examples_format(VOCAB_SIZE)
    (folder / "examples").mkdir(parents=True, exist_ok=True)
    entries = []
    per_shard = -(-examples // shards)
    for s in range(shards):
        count = min(per_shard, examples - s * per_shard)
        lengths = np.where(rng.random(count) < 0.1, rng.integers(8, 128, count), 128)
        rows = []
        for n in lengths.tolist():
            ids = np.minimum(rng.zipf(1.3, n), VOCAB_SIZE - 1000) + 999
            ids[0], ids[-1] = 101, 102
            n_a = int(rng.integers(1, n - 2))
            ids[n_a] = 102
            k = min(20, max(1, round(n * 0.15)))
            positions = np.sort(rng.choice(np.arange(1, n - 1), k, replace=False))
            rows.append(
                {
                    "input_ids": ids.tolist(),
                    "masked_lm_positions": positions.tolist(),
                    "masked_lm_ids": ids[positions].tolist(),
                    "next_sentence_labels": int(rng.integers(2)),
                    "num_tokens_a": n_a + 1,
                    "num_tokens": n,
                    "doc_id": f"doc{s}-{len(rows)}",
                    "dupe_index": 0,
                }
            )
        table = fmt.to_table(rows)
        sink = io.BytesIO()
        with ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as writer:
            writer.write_table(table, max_chunksize=1024)
        blob = sink.getvalue()
        path = f"examples/part-{s:05d}-of-{shards:05d}.arrow"
        (folder / path).write_bytes(blob)
        entries.append(
            ShardEntry(path, "examples", "train", count, len(blob), hashlib.sha256(blob).hexdigest())
        )
    manifest = Manifest("examples", EXAMPLES_VERSION, "benchmarks/reader.py", {}, tuple(entries)).to_json()
    (folder / "manifest.json").write_text(manifest)
    (folder / "COMPLETED").write_text(completed_marker(manifest))


def _cpu_s() -> float:
    return time.process_time()


def time_epoch(make) -> dict:
    """Two epochs of a fresh reader; the second (checksums done, caches warm) is the rate."""
    ds = make()
    for _ in ds:  # first epoch: SHA-256 of every shard, then the data
        pass
    ds.set_epoch(1)
    wall, cpu, rows, tokens = time.perf_counter(), _cpu_s(), 0, 0
    for batch in ds:
        rows += batch["input_ids"].shape[0]
        tokens += int(batch["attention_mask"].sum())
    wall, cpu = time.perf_counter() - wall, _cpu_s() - cpu
    return {"examples": rows, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "examples_per_s": rows / wall}


def time_pyarrow(folder: str, batch_size: int) -> dict:
    dataset = pads.dataset(f"{folder}/examples", format="ipc")
    wall, cpu, rows = time.perf_counter(), _cpu_s(), 0
    for record_batch in dataset.to_batches(batch_size=batch_size):
        import pyarrow as pa

        batch = collate(pa.Table.from_batches([record_batch]))
        rows += batch["input_ids"].shape[0]
    wall, cpu = time.perf_counter() - wall, _cpu_s() - cpu
    return {"examples": rows, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "examples_per_s": rows / wall}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_emulator(folder: Path, batch_size: int) -> dict:
    port = _free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gcp-storage-emulator"),
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the GCS emulator did not start") from None
                time.sleep(0.2)
        import fsspec

        fs = fsspec.filesystem("gs")
        fs.mkdir("bench-bucket")
        fs.put(str(folder), "bench-bucket/shards", recursive=True)
        return time_epoch(lambda: ExampleShards("gs://bench-bucket/shards", batch_size=batch_size, seed=1))
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shards", help="a `pipelines examples` output (default: synthetic shards)")
    parser.add_argument("--examples", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--skip-emulator", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.shards) if args.shards else Path(tmp) / "shards"
        if not args.shards:
            synthetic_shards(folder, args.examples)
        size_mb = sum(p.stat().st_size for p in folder.rglob("*.arrow")) / 1e6
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(VOCAB_SIZE - 5)]
        masking = DynamicMasking.from_vocab(vocab)
        bs = args.batch_size
        results = {
            "shards": str(args.shards or f"synthetic, {args.examples} examples"),
            "shard_mb": round(size_mb, 1),
            "batch_size": bs,
            "local": time_epoch(lambda: ExampleShards(str(folder), batch_size=bs, seed=1)),
            "local_dynamic_masking": time_epoch(
                lambda: ExampleShards(str(folder), batch_size=bs, seed=1, masking=masking)
            ),
            "pyarrow_dataset_scan": time_pyarrow(str(folder), bs),
        }
        if not args.skip_emulator:
            results["gcs_emulator"] = time_emulator(folder, bs)
    results["ours_vs_pyarrow_scan"] = (
        results["local"]["examples_per_s"] / results["pyarrow_dataset_scan"]["examples_per_s"]
    )
    for name in ("local", "local_dynamic_masking", "gcs_emulator", "pyarrow_dataset_scan"):
        if name in results:
            r = results[name]
            print(
                f"{name:24s} {r['examples_per_s']:>10,.0f} examples/s  ({r['examples']} in {r['wall_s']} s, CPU {r['cpu_s']} s)"
            )
    print(f"ours / plain pyarrow scan: {results['ours_vs_pyarrow_scan']:.2f}x")
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
