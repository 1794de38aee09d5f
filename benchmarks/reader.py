"""The trainer's reader over a bucket: requests and bytes per rank, examples/s, time waiting for data.

    python benchmarks/reader.py [--examples 64000] [--shards 8] [--batch-size 128] [--step-ms 20]

Synthetic shards written with the examples schema and index (90% of examples at 128 tokens, Zipf
ids, 20 masks) on a local GCS emulator, read as ``gs://`` through gcsfs. For 1, 2 and 4 ranks (8
streams and 2 DataLoader workers each; and 1 rank in process) each rank reads an epoch through
``ShardLoader`` with a simulated ``--step-ms`` step per batch. Every request gcsfs makes and byte it
receives is counted, in the workers too: requests to build the reader, bytes against the dataset's,
examples/s and the share of time waiting. The peer: ``pyarrow.dataset`` over the same filesystem,
one process reading every shard, into the same collate with the same step.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

VOCAB_SIZE = 30522
BUCKET = "bench-bucket"
WORKERS = 2
STREAMS = 8  # per rank: the trainer's default (pretrain.data.auto_streams) on enough data


def synthetic_shards(folder: Path, examples: int, shards: int, seed: int = 0) -> int:
    """Write a completed, indexed examples output of ``examples`` rows to ``folder``; its bytes."""
    import numpy as np

    from schemas import Manifest, ShardEntry, completed_marker
    from schemas.examples import EXAMPLES_VERSION, examples_format
    from schemas.index import INDEX_FILE, ShardIndex, index_reference, shard_index_entry

    rng = np.random.default_rng(seed)
    fmt = examples_format(VOCAB_SIZE)
    (folder / "examples").mkdir(parents=True, exist_ok=True)
    entries, indexed = [], []
    per_shard = -(-examples // shards)
    for s in range(shards):
        count = min(per_shard, examples - s * per_shard)
        rows = []
        for length in np.where(rng.random(count) < 0.1, rng.integers(8, 128, count), 128).tolist():
            ids = np.minimum(rng.zipf(1.3, length), VOCAB_SIZE - 1000) + 999
            ids[0], ids[-1] = 101, 102
            n_a = int(rng.integers(1, length - 2))
            ids[n_a] = 102
            k = min(20, max(1, round(length * 0.15)))
            positions = np.sort(rng.choice(np.arange(1, length - 1), k, replace=False))
            rows.append(
                {
                    "input_ids": ids.tolist(),
                    "masked_lm_positions": positions.tolist(),
                    "masked_lm_ids": ids[positions].tolist(),
                    "next_sentence_labels": int(rng.integers(2)),
                    "num_tokens_a": n_a + 1,
                    "num_tokens": length,
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
    reference = index_reference(index_json)
    params = {"max_seq_length": 128, "vocab_sha256": "0" * 64}  # no vocabulary: synthetic ids
    manifest = Manifest(
        "examples", EXAMPLES_VERSION, "benchmarks/reader.py", params, tuple(entries), index=reference
    ).to_json()
    (folder / "manifest.json").write_text(manifest)
    (folder / "COMPLETED").write_text(completed_marker(manifest))
    return sum(e.num_bytes for e in entries)


def count_requests():
    """Count every HTTP request gcsfs makes and the body bytes it receives, in this process and its
    forks (``_request`` is the one place every call goes through); the counter, shared memory."""
    import gcsfs
    import torch

    counts = torch.zeros(2, dtype=torch.int64).share_memory_()
    request = gcsfs.GCSFileSystem._request

    async def counted(self, *args, **kwargs):
        status, headers, info, contents = await request(self, *args, **kwargs)
        counts[0] += 1
        if isinstance(contents, bytes | bytearray):
            counts[1] += len(contents)
        return status, headers, info, contents

    gcsfs.GCSFileSystem._request = counted
    return counts


def consume(batches: Iterator, step_s: float, count) -> dict:
    """Step through ``batches`` with a simulated step of ``step_s``: examples/s and waiting share."""
    examples, waited_s, started = 0, 0.0, time.perf_counter()
    while True:
        asked = time.perf_counter()
        batch = next(batches, None)
        if batch is not None:
            examples += count(batch)
        waited_s += time.perf_counter() - asked
        if batch is None:
            wall_s = time.perf_counter() - started
            return {
                "examples": examples,
                "examples_per_s": examples / wall_s,
                "wait_share": waited_s / wall_s,
            }
        time.sleep(step_s)


def read_rank(counts, url: str, rank: int, world_size: int, args, workers: int = WORKERS) -> dict:
    """One rank's epoch through ShardLoader with a simulated step; what it cost."""
    from pretrain.data import ExampleShards, ShardLoader

    start = counts.tolist()
    reader = ExampleShards(
        url, batch_size=args.batch_size, seed=1, rank=rank, world_size=world_size, streams=STREAMS
    )
    build_requests = counts.tolist()[0] - start[0]
    loader = ShardLoader(reader, workers)
    built = counts.tolist()
    figures = consume(loader.epoch(0), args.step_ms / 1000, lambda b: b["input_ids"].shape[0])
    loader.close()
    end = counts.tolist()
    return {
        "rank": rank,
        "build_requests": build_requests,
        "epoch_requests": end[0] - built[0],
        "bytes_fetched": end[1] - built[1],
        **figures,
    }


def read_pyarrow(counts, options: dict, args) -> dict:
    """The peer: pyarrow.dataset over gcsfs, every shard once, into the same collate."""
    import gcsfs
    import pyarrow as pa
    import pyarrow.dataset as pads
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    from pretrain.collate import collate

    gcsfs.GCSFileSystem.clear_instance_cache()
    start = counts.tolist()
    filesystem = PyFileSystem(FSSpecHandler(gcsfs.GCSFileSystem(**options)))
    dataset = pads.dataset(f"{BUCKET}/shards/examples", format="ipc", filesystem=filesystem)
    built = counts.tolist()
    batches = dataset.to_batches(batch_size=args.batch_size)
    figures = consume(
        batches, args.step_ms / 1000, lambda b: collate(pa.Table.from_batches([b]))["input_ids"].shape[0]
    )
    end = counts.tolist()
    return {
        "build_requests": built[0] - start[0],
        "epoch_requests": end[0] - built[0],
        "bytes_fetched": end[1] - start[1],
        **figures,
    }


def start_emulator() -> tuple[subprocess.Popen, str]:
    """A local in-memory GCS emulator on a free port; the process and its endpoint."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emulator = str(Path(sys.executable).parent / "gcp-storage-emulator")
    command = [emulator, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("the GCS emulator did not start")
            time.sleep(0.2)


def main() -> None:
    parser = harness.parser(__doc__, "reader")
    parser.add_argument("--examples", type=int, default=64_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--step-ms", type=float, default=20.0, help="simulated training step per batch")
    args = parser.parse_args()
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # before gcsfs is imported
    import gcsfs
    import torch

    torch.set_num_threads(1)
    server, endpoint = start_emulator()
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    options = {"endpoint_url": endpoint, "token": "anon"}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            dataset_bytes = synthetic_shards(Path(tmp), args.examples, args.shards)
            fs = gcsfs.GCSFileSystem(**options)
            fs.mkdir(BUCKET)
            fs.put(tmp, f"{BUCKET}/shards", recursive=True)
        counts = count_requests()
        url = f"gs://{BUCKET}/shards"
        result: dict = {
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
            per_rank = [read_rank(counts, url, r, world_size, args) for r in range(world_size)]
            fetched = sum(r["bytes_fetched"] for r in per_rank) / dataset_bytes
            result["ranks"][str(world_size)] = {"per_rank": per_rank, "bytes_fetched_over_dataset": fetched}
        result["one_rank_no_workers"] = read_rank(counts, url, 0, 1, args, workers=0)
        result["pyarrow_dataset_gcsfs"] = read_pyarrow(counts, options, args)
    finally:
        server.terminate()
        server.wait(timeout=10)
    harness.write(args.json, result, "torch", "gcsfs", "pyarrow", rows=rows)


def _peer(r: dict) -> str:
    peer = r["pyarrow_dataset_gcsfs"]
    return (
        f"pyarrow.dataset over gcsfs, one reader of every shard: {peer['build_requests']} requests to open, "
        f"{peer['bytes_fetched'] / r['dataset_bytes']:.2f}x the bytes, {n(peer['examples_per_s'])} examples/s, "
        f"waiting {peer['wait_share']:.0%}"
    )


def rows(r: dict) -> list[Row]:
    found, peer_rate = [], r["pyarrow_dataset_gcsfs"]["examples_per_s"]
    data = f"{r['examples']:,} examples in {r['shards']} shards ({n(r['dataset_bytes'] / 1e6)} MB)"
    step = f"batch {r['batch_size']}, {r['step_ms']:.0f} ms simulated step"
    for world_size, run in r["ranks"].items():
        ranks = run["per_rank"]
        rate = sum(k["examples_per_s"] for k in ranks) / len(ranks)
        wait = sum(k["wait_share"] for k in ranks) / len(ranks)
        found.append(
            (
                f"reader, gs:// (GCS emulator), {world_size} rank(s) x {r['workers_per_rank']} workers x "
                f"{r['streams_per_rank']} streams, {data}, {step}",
                f"{max(k['build_requests'] for k in ranks)} requests to build a rank's reader; ranks together "
                f"fetch {run['bytes_fetched_over_dataset']:.2f}x the dataset's bytes; {n(rate)} examples/s "
                f"per rank, waiting {wait:.0%}",
                _peer(r),
                x(rate / peer_rate),
            )
        )
    alone = r["one_rank_no_workers"]
    found.append(
        (
            f"reader, gs:// (GCS emulator), 1 rank, no workers (in process), {step}",
            f"{n(alone['examples_per_s'])} examples/s, waiting {alone['wait_share']:.0%}",
            _peer(r),
            x(alone["examples_per_s"] / peer_rate),
        )
    )
    return found


if __name__ == "__main__":
    main()
