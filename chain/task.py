"""A small GLUE-layout task derived from the corpus, for the demo's fine-tuning step.

"Is sentence B the sentence that follows A?" in MRPC's layout (``Quality  #1 ID  #2 ID  #1 String
#2 String``, label 1 = B follows A). Positive pairs are consecutive sentences of one document;
negative pairs put a sentence from another document after the same A (one of each per position). Training pairs come from the corpus'
``validation`` documents and dev pairs from its ``test`` documents, which pre-training never saw
(it reads the ``train`` split). Every choice is seeded by (seed, document, position), so the task
is the same on every run. Sentences are picked only when both are 5–60 words long.
"""

from __future__ import annotations

import hashlib
import random

import pyarrow.dataset as ds

from schemas import Manifest, storage
from schemas.outputs import OutputFolder

HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"


def _documents(corpus: str, split: str) -> list[tuple[str, list[str]]]:
    fs, root = storage.filesystem(corpus)
    manifest = Manifest.from_json(fs.cat_file(f"{root}/manifest.json").decode(), f"{corpus}/manifest.json")
    paths = [f"{root}/{s.path}" for s in manifest.shards_for(split)]
    if not paths:
        return []
    table = ds.dataset(paths, format="ipc", filesystem=fs).to_table(columns=["doc_id", "sentences"])
    return sorted(zip(table.column("doc_id").to_pylist(), table.column("sentences").to_pylist(), strict=True))


def _usable(sentence: str) -> bool:
    return 5 <= len(sentence.split()) <= 60 and "\t" not in sentence and "\n" not in sentence


def pairs(
    documents: list[tuple[str, list[str]]], limit: int, seed: int
) -> list[tuple[int, str, str, str, str]]:
    """Up to ``limit`` balanced (label, id1, id2, s1, s2) rows."""
    pool = [(doc, i, s) for doc, sentences in documents for i, s in enumerate(sentences) if _usable(s)]
    if len(documents) < 2 or not pool:
        return []
    rows = []
    for doc, sentences in documents:
        for i in range(len(sentences) - 1):
            a, b = sentences[i], sentences[i + 1]
            if not (_usable(a) and _usable(b)):
                continue
            rng = random.Random(hashlib.sha256(f"{seed}\x1f{doc}\x1f{i}".encode()).digest())
            rows.append((1, f"{doc}:{i}", f"{doc}:{i + 1}", a, b))
            for _ in range(10):
                other_doc, j, other = pool[rng.randrange(len(pool))]
                if other_doc != doc:
                    rows.append((0, f"{doc}:{i}", f"{other_doc}:{j}", a, other))
                    break
    rng = random.Random(seed)
    rng.shuffle(rows)
    return rows[:limit]


def write_task(
    corpus: str, output: str, *, train_limit: int = 1200, dev_limit: int = 400, seed: int = 12345
) -> dict:
    """Write ``train.tsv`` and ``dev.tsv`` (MRPC layout) to ``output``, claimed (one writer) and
    replacing only an earlier task's own two files; return their sizes."""
    with OutputFolder.open(output, "chain task", overwrite=True) as folder:
        tables = {}
        for name, split, limit in (("train", "validation", train_limit), ("dev", "test", dev_limit)):
            rows = pairs(_documents(corpus, split), limit, seed)
            if len(rows) < 20:
                raise ValueError(
                    f"{corpus}: only {len(rows)} sentence pairs in its {split} split; give the corpus more "
                    "documents (--validation-fraction/--test-fraction) or fine-tune on a GLUE folder"
                )
            tables[name] = rows
        folder.begin()
        for name, rows in tables.items():
            text = HEADER + "".join(f"{label}\t{a}\t{b}\t{s1}\t{s2}\n" for label, a, b, s1, s2 in rows)
            folder.write(f"{name}.tsv", text)
    return {name: {"pairs": len(rows), "positive": sum(r[0] for r in rows)} for name, rows in tables.items()}
