"""The stages of the demo chain and their settings (``ChainConfig``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from chain import checks
from chain.run import Stage, exists, read_json, script
from chain.task import write_task

NUM_UNUSED = 100
"""``[unused]`` slots the vocabulary stage reserves (``wordpiece train --num-unused``)."""


@dataclass(frozen=True)
class ChainConfig:
    """What the chain runs on and how big it is; the defaults finish in ~10 minutes on 2 cores."""

    workdir: str
    wiki_dump: str
    books: str | None = None
    """A folder of plain-text books (``*.txt``), or None to skip the books stage."""
    glue_dir: str | None = None
    """A GLUE task folder to fine-tune on (with ``glue_task``); None derives a task from the corpus."""
    glue_task: str | None = None
    """The task of ``glue_dir`` (``mrpc`` when not given); refused without ``glue_dir``."""
    vocab_size: int = 8000
    max_seq_length: int = 128
    dupe_factor: int = 2
    model: str = "tiny"
    pretrain_steps: int = 300
    batch_size: int = 32
    precision: str = "fp32"
    finetune_epochs: float = 3.0
    finetune_train_examples: int = 1200
    seed: int = 12345
    runner: tuple[str, ...] = ()
    """Beam options for the pipelines (e.g. ``--runner FnApiRunner``)."""

    def url(self, *parts: str) -> str:
        return "/".join([self.workdir.rstrip("/"), *parts])

    @property
    def task(self) -> str:
        """The GLUE task fine-tuned on: ``glue_task``, or the derived task's MRPC layout."""
        return (self.glue_task if self.glue_dir else None) or checks.DERIVED_TASK

    def problems(self) -> list[str]:
        """Every value or combination of values the stages would refuse, one line each (exit 2)."""
        from wordpiece.tokenizer import SPECIAL_TOKENS

        reserved = len(SPECIAL_TOKENS) + NUM_UNUSED
        found = [] if self.workdir else ["--workdir must not be empty"]
        if self.vocab_size <= reserved:
            found.append(
                f"--vocab-size {self.vocab_size} leaves no room for word pieces after {len(SPECIAL_TOKENS)} "
                f"special tokens and {NUM_UNUSED} [unused] slots: give at least {reserved + 1}"
            )
        found += checks.model_problems(self.model, self.precision)
        found += checks.at_least("--pretrain-steps", self.pretrain_steps, 1)
        found += checks.positive("--finetune-epochs", self.finetune_epochs)
        found += checks.seed_problems(self.seed)
        found += checks.beam_problems(self.runner)
        found += checks.glue_problems(self.glue_dir, self.glue_task)
        return found

    def input_problems(self) -> list[str]:
        """Every input that is missing or lacks what a stage reads, one line each (exit 1)."""
        found = checks.files_problems("--wiki-dump", self.wiki_dump)
        if self.books:
            found += checks.books_problems(self.books)
        if self.glue_dir:
            found += checks.glue_dir_problems(self.glue_dir, self.glue_task)
        return found


def _completed(url: str) -> bool:
    return exists(f"{url}/COMPLETED")


def plan(cfg: ChainConfig) -> list[Stage]:
    """Every stage, in order."""
    return [*_corpus_stages(cfg), *_example_stages(cfg), *_pretrain_stages(cfg), *_finetune_stages(cfg)]


def _corpus_stages(cfg: ChainConfig) -> list[Stage]:
    """Wikipedia (and books), the merged corpus, and the vocabulary."""
    u = cfg.url
    beam = list(cfg.runner)
    stages = [
        Stage(
            "wikipedia",
            f"pipelines wikipedia: {cfg.wiki_dump}",
            u("corpus", "wiki"),
            [script("pipelines"), "wikipedia", "--input", cfg.wiki_dump, "--output", u("corpus", "wiki"),
             "--num-shards", "4", "--overwrite", *beam],
            done=lambda: _completed(u("corpus", "wiki")),
        ),
    ]  # fmt: skip
    corpus_inputs = ["--input", u("corpus", "wiki")]
    if cfg.books:
        stages.append(
            Stage(
                "books",
                f"pipelines books: {cfg.books}",
                u("corpus", "books"),
                [script("pipelines"), "books", "--input", f"{cfg.books.rstrip('/')}/*.txt",
                 "--output", u("corpus", "books"), "--num-shards", "2", "--overwrite", *beam],
                done=lambda: _completed(u("corpus", "books")),
            )
        )  # fmt: skip
        corpus_inputs += ["--input", u("corpus", "books")]
    stages += [
        Stage(
            "corpus",
            "pipelines corpus: merge, deduplicate, split",
            u("corpus", "all"),
            [script("pipelines"), "corpus", *corpus_inputs, "--output", u("corpus", "all"),
             "--validation-fraction", "0.05", "--test-fraction", "0.05", "--num-shards", "2", "--overwrite", *beam],
            done=lambda: _completed(u("corpus", "all")),
            upstream=("wikipedia", "books") if cfg.books else ("wikipedia",),
        ),
        Stage(
            "vocab",
            f"wordpiece train: {cfg.vocab_size:,} tokens",
            u("vocab"),
            [script("wordpiece"), "train", "--corpus", u("corpus", "all"), "--output", u("vocab"),
             "--vocab-size", str(cfg.vocab_size), "--num-unused", str(NUM_UNUSED), "--overwrite", *beam],
            done=lambda: _completed(u("vocab")),
            upstream=("corpus",),
        ),
    ]  # fmt: skip
    return stages


def _example_stages(cfg: ChainConfig) -> list[Stage]:
    """Training and validation example shards."""
    u = cfg.url
    beam = list(cfg.runner)
    stages = []
    shards = u("shards", f"seq{cfg.max_seq_length}")
    validation = u("shards", f"seq{cfg.max_seq_length}-validation")
    for name, split, out, dupe, num_shards in (
        ("examples", "train", shards, cfg.dupe_factor, 8),
        ("examples-validation", "validation", validation, 1, 2),
    ):
        stages.append(
            Stage(
                name,
                f"pipelines examples: {split} shards at {cfg.max_seq_length}",
                out,
                [script("pipelines"), "examples", "--corpus", u("corpus", "all"), "--vocab", u("vocab", "vocab.txt"),
                 "--split", split, "--output", out, "--max-seq-length", str(cfg.max_seq_length),
                 "--dupe-factor", str(dupe), "--num-shards", str(num_shards), "--num-buckets", "16",
                 "--seed", str(cfg.seed), "--overwrite", *beam],
                done=lambda out=out: _completed(out),
                upstream=("vocab",),
            )
        )  # fmt: skip
    return stages


def _pretrain_stages(cfg: ChainConfig) -> list[Stage]:
    """Pre-training (resumable from its checkpoints) and the transformers export."""
    u = cfg.url
    shards = u("shards", f"seq{cfg.max_seq_length}")
    validation = u("shards", f"seq{cfg.max_seq_length}-validation")
    run = u("runs", cfg.model)
    final = f"{run}/checkpoints/step-{cfg.pretrain_steps:08d}/COMMITTED"
    pretrain = [
        script("pretrain"), "--shards", shards, "--validation-shards", validation, "--config", cfg.model,
        "--output", run, "--global-batch-size", str(cfg.batch_size), "--max-steps", str(cfg.pretrain_steps),
        "--lr", "1e-3", "--warmup-steps", str(max(1, cfg.pretrain_steps // 10)), "--precision", cfg.precision,
        "--save-steps", str(max(1, cfg.pretrain_steps // 3)), "--log-steps", str(max(1, cfg.pretrain_steps // 12)),
        "--eval-steps", str(max(1, cfg.pretrain_steps // 3)), "--eval-batches", "20", "--num-workers", "0",
        "--seed", str(cfg.seed), "--overwrite",
    ]  # fmt: skip

    def resume_pretrain() -> list[str] | None:
        if not exists(f"{run}/checkpoints"):
            return None
        return [script("pretrain"), "--resume", run, "--shards", shards]

    return [
        Stage(
            "pretrain",
            f"pretrain: a {cfg.model} BERT, {cfg.pretrain_steps} steps, evaluated on held-out shards",
            run,
            pretrain,
            done=lambda: exists(final),
            upstream=("examples", "examples-validation"),
            resume=resume_pretrain,
        ),
        Stage(
            "export",
            "pretrain export: transformers' format",
            u("hf", cfg.model),
            [script("pretrain"), "export", "--checkpoint", run, "--format", "hf", "--output", u("hf", cfg.model),
             "--overwrite"],
            done=lambda: exists(u("hf", cfg.model, "model.safetensors")),
            upstream=("pretrain",),
        ),
    ]  # fmt: skip


def _finetune_stages(cfg: ChainConfig) -> list[Stage]:
    """The GLUE-layout task (derived from the corpus unless ``glue_dir``) and fine-tuning on it."""
    u = cfg.url
    run = u("runs", cfg.model)
    stages = []
    if cfg.glue_dir:
        data_dir, task = cfg.glue_dir, cfg.task
    else:
        data_dir, task = u("tasks", "next-sentence"), cfg.task
        stages.append(
            Stage(
                "task",
                "a GLUE-layout task from held-out documents: does B follow A? (MRPC layout)",
                data_dir,
                action=lambda: {"task": write_task(u("corpus", "all"), data_dir, seed=cfg.seed)},
                done=lambda: exists(f"{data_dir}/dev.tsv"),
                upstream=("corpus",),
                info={"seed": cfg.seed},
            )
        )
    ft = u("finetune", task if cfg.glue_dir else "next-sentence")
    stages.append(
        Stage(
            "finetune",
            f"finetune glue --task {task}: {data_dir}",
            ft,
            [script("finetune"), "glue", "--task", task, "--data-dir", data_dir, "--checkpoint", run,
             "--output", ft, "--epochs", str(cfg.finetune_epochs), "--lr", "1e-4", "--batch-size", "32",
             "--max-seq-length", str(cfg.max_seq_length), "--max-train-examples", str(cfg.finetune_train_examples),
             "--seed", str(cfg.seed), "--overwrite"],
            done=lambda: exists(f"{ft}/metrics.json"),
            upstream=("pretrain", *(() if cfg.glue_dir else ("task",))),
        )
    )  # fmt: skip
    return stages


def settings(cfg: ChainConfig) -> dict:
    return asdict(cfg)


def outputs(cfg: ChainConfig) -> dict[str, str]:
    """Where the report finds each stage's results."""
    u = cfg.url
    return {
        "wiki": u("corpus", "wiki"),
        "books": u("corpus", "books") if cfg.books else "",
        "corpus": u("corpus", "all"),
        "vocab": u("vocab"),
        "shards": u("shards", f"seq{cfg.max_seq_length}"),
        "validation_shards": u("shards", f"seq{cfg.max_seq_length}-validation"),
        "run": u("runs", cfg.model),
        "export": u("hf", cfg.model),
        "finetune": u("finetune", cfg.task if cfg.glue_dir else "next-sentence"),
    }


__all__ = ["ChainConfig", "outputs", "plan", "read_json", "settings"]
