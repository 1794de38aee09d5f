"""The trainer's reader over a bucket: bytes and requests per rank, examples/s, time waiting for data.

    python benchmarks/reader.py [--examples 64000] [--shards 8] [--batch-size 128] [--step-ms 20]

Input: synthetic shards written with the examples schema and the writer's own serialisation and
index (``schemas.index``): ``--examples`` examples whose lengths follow the reference generator's
(90% at max_seq_length 128, 10% shorter) with Zipf-distributed token ids of a 30,522 vocabulary,
20 masks each, ``--shards`` shards, zstd, 1,024 rows per record batch. They are uploaded to a
local GCS emulator (``gcp-storage-emulator``, in memory; a Python server, so rates are a lower
bound for a real bucket) and read as ``gs://`` through gcsfs.

For 1, 2 and 4 ranks, each rank in turn builds ``pretrain.data.ExampleShards`` with the trainer's
8 streams per rank and reads one epoch through ``ShardLoader`` with 2 DataLoader workers (and once
more: 1 rank, no workers), while a simulated training step of ``--step-ms`` (a sleep: the GPU's
share) runs on every batch. Every HTTP request gcsfs makes and
every byte it returns is counted, in the workers too (a counter in shared memory), so the figures
are what a bucket would bill: requests needed to build the reader, bytes fetched per rank and in
all against the dataset's bytes (above 1x only by the record batches that straddle the segments
of two processes, ranks or workers: at most ranks × workers − 1 of them), examples/s, and the
share of wall time the step loop spent waiting for the next batch.

Peer: ``pyarrow.dataset`` over the same gcsfs filesystem, one process reading every shard once
(as each rank of a naive DDP job would): its requests to open the dataset, bytes, examples/s.
Results go to ``benchmarks/results/reader.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # before gcsfs is imported

import gcsfs  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402
import torch  # noqa: E402
from pyarrow.fs import FSSpecHandler, PyFileSystem  # noqa: E402

from pretrain.collate import collate  # noqa: E402
from pretrain.data import ExampleShards, ShardLoader  # noqa: E402
from schemas import Manifest, ShardEntry, completed_marker  # noqa: E402
from schemas.examples import EXAMPLES_VERSION, examples_format  # noqa: E402
from schemas.index import INDEX_FILE, ShardIndex, index_reference, shard_index_entry  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "reader.json"
VOCAB_SIZE = 30522
BUCKET = "bench-bucket"
WORKERS = 2
STREAMS = 8  # per rank: the trainer's default (pretrain.data.auto_streams) on enough data

# [requests, bytes returned by object reads], shared with the DataLoader workers (fork)
COUNTS = torch.zeros(2, dtype=torch.int64).share_memory_()


def _count_gcsfs() -> None:
    """Count every HTTP request gcsfs makes and the body bytes it receives, in this process and
    its forks (``_request`` is the one place every call goes through)."""
    request = gcsfs.GCSFileSystem._request

    async def counted(self, *args, **kwargs):
        status, headers, info, contents = await request(self, *args, **kwargs)
        COUNTS[0] += 1
        if isinstance(contents, bytes | bytearray):
            COUNTS[1] += len(contents)
        return status, headers, info, contents

    gcsfs.GCSFileSystem._request = counted


def _counts() -> tuple[int, int]:
    return int(COUNTS[0]), int(COUNTS[1])


def synthetic_shards(folder: Path, examples: int, shards: int, seed: int = 0) -> int:
    """Write a completed, indexed examples output of ``examples`` rows to ``folder``; its bytes."""
    rng = np.random.default_rng(seed)
    fmt = examples_format(VOCAB_SIZE)
    (folder / "examples").mkdir(parents=True, exist_ok=True)
    entries, indexed = [], []
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
        path = f"examples/part-{s:05d}-of-{shards:05d}.arrow"
        blob = fmt.to_ipc_bytes(fmt.to_table(rows, path), path)
        (folder / path).write_bytes(blob)
        entries.append(
            ShardEntry(path, "examples", "train", count, len(blob), hashlib.sha256(blob).hexdigest())
        )
        indexed.append(shard_index_entry(path, blob)[0])
    index_json = ShardIndex("examples", EXAMPLES_VERSION, fmt.schema, tuple(indexed)).to_json()
    (folder / INDEX_FILE).write_text(index_json)
    manifest = Manifest(
        "examples",
        EXAMPLES_VERSION,
        "benchmarks/reader.py",
        {},
        tuple(entries),
        index=index_reference(index_json),
    ).to_json()
    (folder / "manifest.json").write_text(manifest)
    (folder / "COMPLETED").write_text(completed_marker(manifest))
    return sum(e.num_bytes for e in entries)


def read_rank(
    url: str, rank: int, world_size: int, batch_size: int, step_s: float, workers: int = WORKERS
) -> dict:
    """One rank's epoch through ShardLoader (``workers`` DataLoader workers) with a simulated
    step; what it cost."""
    requests_0, _ = _counts()
    reader = ExampleShards(
        url, batch_size=batch_size, seed=1, rank=rank, world_size=world_size, streams=STREAMS
    )
    build_requests = _counts()[0] - requests_0
    loader = ShardLoader(reader, workers)
    requests_0, bytes_0 = _counts()
    examples, waited_s, started = 0, 0.0, time.perf_counter()
    batches = loader.epoch(0)
    while True:
        asked = time.perf_counter()
        batch = next(batches, None)
        waited_s += time.perf_counter() - asked
        if batch is None:
            break
        examples += batch["input_ids"].shape[0]
        time.sleep(step_s)  # the training step
    wall_s = time.perf_counter() - started
    loader.close()
    requests, fetched = (a - b for a, b in zip(_counts(), (requests_0, bytes_0), strict=True))
    return {
        "rank": rank,
        "build_requests": build_requests,
        "epoch_requests": requests,
        "bytes_fetched": fetched,
        "examples": examples,
        "examples_per_s": examples / wall_s,
        "wait_share": waited_s / wall_s,
    }


def read_pyarrow(fs: gcsfs.GCSFileSystem, batch_size: int, step_s: float) -> dict:
    """The peer: pyarrow.dataset over gcsfs, every shard once, into the same collate, with the
    same simulated step."""
    requests_0, bytes_0 = _counts()
    dataset = pads.dataset(
        f"{BUCKET}/shards/examples", format="ipc", filesystem=PyFileSystem(FSSpecHandler(fs))
    )
    build_requests = _counts()[0] - requests_0
    started, examples, waited_s = time.perf_counter(), 0, 0.0
    batches = dataset.to_batches(batch_size=batch_size)
    while True:
        asked = time.perf_counter()
        record_batch = next(batches, None)
        if record_batch is not None:
            examples += collate(pa.Table.from_batches([record_batch]))["input_ids"].shape[0]
        waited_s += time.perf_counter() - asked
        if record_batch is None:
            break
        time.sleep(step_s)
    wall_s = time.perf_counter() - started
    requests, fetched = (a - b for a, b in zip(_counts(), (requests_0, bytes_0), strict=True))
    return {
        "build_requests": build_requests,
        "epoch_requests": requests - build_requests,
        "bytes_fetched": fetched,
        "examples": examples,
        "examples_per_s": examples / wall_s,
        "wait_share": waited_s / wall_s,
    }


def _start_emulator() -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emulator = str(Path(sys.executable).parent / "gcp-storage-emulator")
    server = subprocess.Popen(
        [emulator, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, port
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("the GCS emulator did not start") from None
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=64_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--step-ms", type=float, default=20.0, help="simulated training step per batch")
    args = parser.parse_args()
    torch.set_num_threads(1)
    server, port = _start_emulator()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    options = {"endpoint_url": endpoint, "token": "anon"}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            dataset_bytes = synthetic_shards(Path(tmp), args.examples, args.shards)
            fs = gcsfs.GCSFileSystem(**options)
            fs.mkdir(BUCKET)
            fs.put(tmp, f"{BUCKET}/shards", recursive=True)
        _count_gcsfs()
        url = f"gs://{BUCKET}/shards"
        results: dict = {
            "examples": args.examples,
            "shards": args.shards,
            "dataset_bytes": dataset_bytes,
            "batch_size": args.batch_size,
            "workers_per_rank": WORKERS,
            "streams_per_rank": STREAMS,
            "step_ms": args.step_ms,
            "ranks": {},
        }
        for world_size in (1, 2, 4):
            per_rank = [
                read_rank(url, r, world_size, args.batch_size, args.step_ms / 1000) for r in range(world_size)
            ]
            results["ranks"][str(world_size)] = {
                "per_rank": per_rank,
                "bytes_fetched_over_dataset": sum(r["bytes_fetched"] for r in per_rank) / dataset_bytes,
            }
        # the same rank reading in its own process: what the workers' hand-over costs here
        results["one_rank_no_workers"] = read_rank(url, 0, 1, args.batch_size, args.step_ms / 1000, workers=0)
        gcsfs.GCSFileSystem.clear_instance_cache()
        results["pyarrow_dataset_gcsfs"] = read_pyarrow(
            gcsfs.GCSFileSystem(**options), args.batch_size, args.step_ms / 1000
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    _print(results)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


def _print(results: dict) -> None:
    mb = results["dataset_bytes"] / 1e6
    print(f"dataset: {results['shards']} shards, {mb:.1f} MB, {results['examples']:,} examples")
    for world_size, run in results["ranks"].items():
        for r in run["per_rank"]:
            print(
                f"{world_size} rank(s) x {results['workers_per_rank']} workers, rank {r['rank']}: "
                f"build {r['build_requests']} requests, epoch {r['epoch_requests']} requests, "
                f"{r['bytes_fetched'] / 1e6:.1f} MB ({r['bytes_fetched'] / results['dataset_bytes']:.2f}x dataset), "
                f"{r['examples_per_s']:,.0f} examples/s, waiting {r['wait_share']:.1%} of the time"
            )
        print(f"  all ranks together: {run['bytes_fetched_over_dataset']:.2f}x the dataset's bytes")
    r = results["one_rank_no_workers"]
    print(
        f"1 rank, no workers (in process): {r['bytes_fetched'] / 1e6:.1f} MB, {r['examples_per_s']:,.0f} "
        f"examples/s, waiting {r['wait_share']:.1%} of the time"
    )
    p = results["pyarrow_dataset_gcsfs"]
    print(
        f"peer pyarrow.dataset over gcsfs (one reader, every shard): build {p['build_requests']} requests, "
        f"epoch {p['epoch_requests']}, {p['bytes_fetched'] / 1e6:.1f} MB, {p['examples_per_s']:,.0f} examples/s, "
        f"waiting {p['wait_share']:.1%} of the time"
    )


if __name__ == "__main__":
    main()
