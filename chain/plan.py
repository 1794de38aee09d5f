"""The demo chain's settings (:class:`ChainConfig`) and its stages, in order."""

from __future__ import annotations

from dataclasses import dataclass

from chain import checks
from chain.run import Stage, tool
from chain.task import write_task
from schemas.commands import seed_problems

NUM_UNUSED = 100  # [unused] slots the vocabulary stage reserves


@dataclass(frozen=True)
class ChainConfig:
    """What the chain runs on and how big it is; the defaults take ~10 minutes on 2 cores."""

    workdir: str = "out/demo"
    wiki_dump: str = ""
    corpus: str | None = None  # a completed `pipelines corpus` output instead of building one
    books: str | None = None  # a folder of plain-text books (*.txt); None skips the books stage
    documents: str | None = None  # JSON Lines, Parquet or a datasets folder for `pipelines documents`
    documents_options: tuple[str, ...] = ()  # its field flags (--title-field=title, --group-rows=100)
    glue_dir: str | None = None  # a GLUE task folder; None fine-tunes on a task derived from the corpus
    glue_task: str | None = None  # the task of glue_dir (mrpc when not given)
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
    runner: tuple[str, ...] = ()  # Beam options for every pipeline

    def url(self, *parts: str) -> str:
        return "/".join([self.workdir.rstrip("/"), *parts])

    @property
    def task(self) -> str:
        return (self.glue_task if self.glue_dir else None) or checks.DERIVED_TASK

    def problems(self) -> list[str]:
        """Every value the stages would refuse (exit 2)."""
        from wordpiece.tokenizer import reserve_problem

        found = [] if self.wiki_dump or self.documents or self.corpus else ["give --wiki-dump or --documents"]
        if self.documents_options and not self.documents:
            found.append("--documents-option is for the documents stage: give --documents too")
        found += [] if self.workdir else ["--workdir must not be empty"]
        found += filter(None, [reserve_problem(self.vocab_size, NUM_UNUSED)])
        found += checks.model_problems("--model", self.model, self.precision)
        if self.pretrain_steps < 1:
            found.append(f"--pretrain-steps must be at least 1, got {self.pretrain_steps}")
        if not 0 < self.finetune_epochs < float("inf"):
            found.append(f"--finetune-epochs must be positive, got {self.finetune_epochs}")
        found += seed_problems(self.seed) + checks.glue_problems(self.glue_dir, self.glue_task)
        return found + checks.beam_problems(self.runner)

    def input_problems(self) -> list[str]:
        """Every input that is missing or lacks what a stage reads (exit 1)."""
        found = checks.files_problems("--wiki-dump", self.wiki_dump) if self.wiki_dump else []
        if self.books:
            layout = f"the books stage reads {self.books.rstrip('/')}/*.txt"
            found += checks.folder_problems("--books", self.books, ["*.txt"], layout)
        if self.documents:
            output = self.outputs()["documents"]
            found += checks.documents_problems(self.documents, self.documents_options, output, self.runner)
        if self.glue_dir:
            found += checks.glue_dir_problems(self.glue_dir, self.glue_task)
        return found

    def outputs(self) -> dict[str, str]:
        """Where each stage's output is (the report reads them)."""
        u, seq = self.url, f"seq{self.max_seq_length}"
        return {
            "wiki": u("corpus", "wiki") if self.wiki_dump else "",
            "books": u("corpus", "books") if self.books else "",
            "documents": u("corpus", "documents") if self.documents else "",
            "corpus": (self.corpus or u("corpus", "all")).rstrip("/"),
            "vocab": u("vocab"),
            "shards": u("shards", seq),
            "validation": u("shards", f"{seq}-validation"),
            "task_dir": self.glue_dir or u("tasks", "next-sentence"),
            "run": u("runs", self.model),
            "export": u("hf", self.model),
            "finetune": u("finetune", self.task if self.glue_dir else "next-sentence"),
        }


def plan(cfg: ChainConfig) -> list[Stage]:
    """Every stage of the demo, in order (with ``corpus`` given, none that builds one)."""
    out, beam, seq = cfg.outputs(), cfg.runner, cfg.max_seq_length
    done = {key: f"{folder}/COMPLETED" for key, folder in out.items()}
    stages = [] if cfg.corpus else _corpus_stages(cfg, out, done)
    line = f"wordpiece train --vocab-size {cfg.vocab_size} --num-unused {NUM_UNUSED} --overwrite"
    command = tool(line, *beam, corpus=out["corpus"], output=out["vocab"])
    title = f"wordpiece train: {cfg.vocab_size:,} tokens"
    stages.append(Stage("vocab", title, out["vocab"], command, done["vocab"], ("corpus",)))
    for name, split, key, dupe, shards in (
        ("examples", "train", "shards", cfg.dupe_factor, 8),
        ("examples-validation", "validation", "validation", 1, 2),
    ):
        line = f"pipelines examples --split {split} --max-seq-length {seq} --dupe-factor {dupe}"
        line += f" --num-shards {shards} --num-buckets 16 --seed {cfg.seed} --overwrite"
        paths = dict(corpus=out["corpus"], vocab=f"{out['vocab']}/vocab.txt", output=out[key])
        command = tool(line, *beam, **paths)
        title = f"pipelines examples: {split} shards at {seq}"
        stages.append(Stage(name, title, out[key], command, done[key], ("vocab",)))
    if not cfg.glue_dir:
        title = "a GLUE-layout task from held-out documents: does B follow A? (MRPC layout)"
        task = Stage("task", title, out["task_dir"], None, f"{out['task_dir']}/dev.tsv", ("corpus",))
        task.action = lambda: {"task": write_task(out["corpus"], out["task_dir"], seed=cfg.seed)}
        task.info = {"seed": cfg.seed, "corpus": out["corpus"]}
        stages.append(task)
    return stages + _model_stages(cfg, out)


def _corpus_stages(cfg: ChainConfig, out: dict[str, str], done: dict[str, str]) -> list[Stage]:
    """Wikipedia, books and a corpus the user has (each when given) into one deduplicated, split corpus."""
    sources = (
        ("wikipedia", "wiki", cfg.wiki_dump, cfg.wiki_dump, 4, ()),
        ("books", "books", cfg.books, f"{(cfg.books or '').rstrip('/')}/*.txt", 2, ()),
        ("documents", "documents", cfg.documents, cfg.documents, 4, cfg.documents_options),
    )
    stages = []
    for name, key, given, read, num_shards, options in sources:
        if given:
            line = f"pipelines {name} --num-shards {num_shards} --overwrite"
            command = tool(line, *options, *cfg.runner, input=read, output=out[key])
            stages.append(Stage(name, f"pipelines {name}: {given}", out[key], command, done[key]))
    inputs = [a for stage in stages for a in ("--input", stage.output)]
    line = "pipelines corpus --validation-fraction 0.05 --test-fraction 0.05 --num-shards 2 --overwrite"
    command = tool(line, *inputs, *cfg.runner, output=out["corpus"])
    upstream = tuple(stage.name for stage in stages)
    title = "pipelines corpus: merge, deduplicate, split"
    return [*stages, Stage("corpus", title, out["corpus"], command, done["corpus"], upstream)]


def _model_stages(cfg: ChainConfig, out: dict[str, str]) -> list[Stage]:
    """Pre-training (continued from its checkpoints), the transformers export and fine-tuning."""
    run, steps = out["run"], cfg.pretrain_steps
    line = f"pretrain --config {cfg.model} --global-batch-size {cfg.batch_size} --max-steps {steps} --lr 1e-3"
    line += f" --warmup-steps {max(1, steps // 10)} --precision {cfg.precision} --eval-batches 20"
    line += f" --save-steps {max(1, steps // 3)} --log-steps {max(1, steps // 12)} --eval-steps {max(1, steps // 3)}"
    line += f" --num-workers 0 --seed {cfg.seed} --overwrite"
    pretrain = tool(line, shards=out["shards"], validation_shards=out["validation"], output=run)
    final, upstream = f"{run}/checkpoints/step-{steps:08d}/COMMITTED", ("examples", "examples-validation")
    resume = tool("pretrain", resume=run, shards=out["shards"])
    title = f"pretrain: a {cfg.model} BERT, {steps} steps, evaluated on held-out shards"
    stages = [Stage("pretrain", title, run, pretrain, final, upstream, resume)]
    export = tool("pretrain export --format hf --overwrite", checkpoint=run, output=out["export"])
    title, done = "pretrain export: transformers' format", f"{out['export']}/model.safetensors"
    stages.append(Stage("export", title, out["export"], export, done, ("pretrain",)))
    line = f"finetune glue --task {cfg.task} --epochs {cfg.finetune_epochs} --lr 1e-4 --batch-size 32"
    line += f" --max-seq-length {cfg.max_seq_length} --max-train-examples {cfg.finetune_train_examples}"
    paths = dict(data_dir=out["task_dir"], checkpoint=run, output=out["finetune"])
    finetune = tool(f"{line} --seed {cfg.seed} --overwrite", **paths)
    title, done = f"finetune glue --task {cfg.task}: {out['task_dir']}", f"{out['finetune']}/metrics.json"
    upstream = ("pretrain", "task")[: 1 + (not cfg.glue_dir)]
    return [*stages, Stage("finetune", title, out["finetune"], finetune, done, upstream)]
