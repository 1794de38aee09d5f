"""`pipelines documents` on the five published layouts, and `datasets.load_dataset` reading the same
files in the same run.

    python benchmarks/documents.py [--rounds 3]

The layouts are built by tests/layouts.py from the real text in ../shared/data (wikimedia/wikipedia
Parquet, bookcorpusopen, bookcorpus, Dolma's gzipped JSON Lines, a save_to_disk folder). For each,
in this process and on one core, interleaved (``harness.interleave``, the median of ``--rounds``):

- ours, reading: every part ``plan_reads`` makes, through ``read_part`` (records with their fields
  checked, as the stage's workers read them);
- the peer: ``datasets.load_dataset`` on the same files (``json``, ``parquet`` or ``arrow``, a fresh
  cache folder each round, so it converts them as a first load does), then every row's text read;
- ours, whole: reading, cleaning and splitting into sentences (``record_outcome``, or the grouping
  of ``--group-rows``).

Input MB are the text field's UTF-8 bytes. The wall time of each ``pipelines documents`` command on
Beam's in-process runner (one worker, start-up included) is measured once.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

PEER_FORMAT = {"wikipedia": "parquet", "bookcorpusopen": "parquet", "bookcorpus": "parquet"}
PEER_FORMAT |= {"dolma": "json", "save_to_disk": "arrow"}


def _config(layout):
    from pipelines.config import DocumentsConfig

    flags = dict(zip(layout.flags[0::2], layout.flags[1::2], strict=True))
    fields = {k.removeprefix("--").replace("-", "_"): v for k, v in flags.items()}
    fields |= {"group_rows": int(fields["group_rows"])} if "group_rows" in fields else {}
    return DocumentsConfig(inputs=tuple(layout.inputs), output="unused", **fields)


def ours_read(layout) -> list:
    from pipelines.documents.read import Record, plan_reads, read_part

    config, records = _config(layout), []
    for path in layout.files:
        for part in plan_reads(
            str(path), config.fields(), config.bytes_per_read, config.group_rows is not None
        ):
            records += [r for r in read_part(part, config.fields()) if isinstance(r, Record)]
    return records


def ours_whole(layout) -> int:
    """Read, clean and split every record (grouped rows as the stage groups them); the sentences made."""
    from pipelines.documents.pipeline import group_member, group_outcome, record_outcome

    config, records = _config(layout), ours_read(layout)
    if not config.group_rows:
        return sum(len(o.row["sentences"]) for o in (record_outcome(r, config) for r in records) if o.row)
    groups: dict[str, list] = {}
    for record in records:
        key, member = group_member(record, config)
        groups.setdefault(key, []).append(member)
    outcomes = [group_outcome(key, members, config) for key, members in groups.items()]
    return sum(len(o.row["sentences"]) for o in outcomes if o.row)


def peer_read(layout, name: str) -> int:
    """``datasets.load_dataset`` on the layout's files in a fresh cache, every row's text read."""
    import datasets

    datasets.disable_progress_bars()
    cache = tempfile.mkdtemp(prefix="bench-datasets-")
    try:
        files = [str(f) for f in layout.files]
        dataset = datasets.load_dataset(PEER_FORMAT[name], data_files=files, split="train", cache_dir=cache)
        return sum(len(text) for batch in dataset.iter(batch_size=1000) for text in batch["text"])
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def command_wall_s(layout, output: Path) -> float:
    inputs = [a for path in layout.inputs for a in ("--input", path)]
    return harness.pipelines("documents", *inputs, *layout.flags, output=output, num_shards=4).wall_s


def measure(name: str, layout, rounds: int, work: Path) -> dict:
    records = ours_read(layout)
    mb = sum(len(r.values[_config(layout).text_field].encode("utf-8")) for r in records) / 1e6
    variants = {
        "ours_read": lambda _: ours_read(layout),
        "peer_read": lambda _: peer_read(layout, name),
        "ours_whole": lambda _: ours_whole(layout),
    }
    times = harness.interleave(variants, rounds, warmup=1)
    cpu = {k: statistics.median(v["cpu_s"]) for k, v in times.items()}
    found = {"rows": len(layout.rows), "records": len(records), "text_mb": mb, "cpu_s": cpu}
    found |= {f"{k}_mb_per_s": mb / s for k, s in cpu.items()}
    found["read_ratio_vs_datasets"] = cpu["peer_read"] / cpu["ours_read"]
    found["command_wall_s"] = command_wall_s(layout, work / name)
    return found


def main() -> None:
    parser = harness.parser(__doc__, "documents")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per variant; the median is kept")
    args = parser.parse_args()
    harness.require(harness.WIKI_DUMP, harness.BOOKS)
    from tests.layouts import LAYOUTS, build_layouts

    with tempfile.TemporaryDirectory() as tmp:
        layouts = build_layouts(Path(tmp) / "layouts", harness.WIKI_DUMP, sorted(harness.BOOKS.glob("*.txt")))
        result = {name: measure(name, layouts[name], args.rounds, Path(tmp)) for name in LAYOUTS}
    harness.write(args.json, result, "datasets", "pyarrow", rows=rows)


def rows(r: dict) -> list[Row]:
    found = []
    for name in ("wikipedia", "bookcorpusopen", "bookcorpus", "dolma", "save_to_disk"):
        if name not in r:
            continue
        m = r[name]
        what = f"documents: read `{name}` ({m['rows']:,} rows, {n(m['text_mb'])} MB of text), 1 core"
        ours = (
            f"{n(m['ours_read_mb_per_s'])} MB/s read; {n(m['ours_whole_mb_per_s'])} MB/s read, cleaned and "
            f"split; command {m['command_wall_s']:.1f} s"
        )
        peer = f"`datasets.load_dataset` ({PEER_FORMAT[name]}, fresh cache) + every text: {n(m['peer_read_mb_per_s'])} MB/s"
        found.append((what, ours, peer, x(m["read_ratio_vs_datasets"])))
    return found


if __name__ == "__main__":
    main()
