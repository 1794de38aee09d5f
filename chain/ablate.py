"""``python -m chain ablate``: the paper's ablations (Tables 5-8, Figure 5) as one resumable grid.

The grid is a list of pre-training runs and, for each, the fine-tuning runs that fill the
tables' cells. Both become chain stages (``chain.run.Stage``) after the demo chain's own corpus,
vocabulary, shards and task stages, so a rerun skips whatever finished and every cell's command
is the real ``pretrain`` / ``finetune`` command, printed as it runs and kept in ``chain.json``.

Runs are shared between tables where the paper's rows coincide: BERT_BASE of Table 5 is the
base-size row of Table 6, the 80/10/10 row of Table 8 and the fine-tuned row of Table 7.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from chain import checks
from chain.checks import SettingsError
from chain.plan import ChainConfig, plan
from chain.run import Stage, exists, script

TABLES = ("5", "6", "7", "8")

MASKING_MIXES = (
    (0.8, 0.1, 0.1),
    (1.0, 0.0, 0.0),
    (0.8, 0.0, 0.2),
    (0.8, 0.2, 0.0),
    (0.0, 0.2, 0.8),
    (0.0, 0.0, 1.0),
)
"""Table 8's rows: shares of the chosen positions -> [MASK], kept, random token."""

NER_FEATURES = ("embeddings", "second-to-last", "last", "sum-last-4", "concat-last-4", "sum-all")
"""Table 7's feature-based rows, as ``finetune ner --features`` names them."""


@dataclass(frozen=True)
class Preset:
    """The sizes and budgets of one study."""

    name: str
    model: str
    """L/H/A of the base model (the paper: 12/768/12)."""
    sizes: tuple[str, ...]
    """Table 6's L/H/A grid (the base model among them)."""
    steps: int
    batch_size: int
    lr: float
    max_seq_length: int
    dupe_factor: int
    vocab_size: int
    pretrain_seeds: int
    finetune_seeds: int
    finetune_epochs: float
    finetune_train_examples: int | None
    finetune_eval_examples: int | None
    finetune_lr: float
    ner_epochs: float
    ner_train_examples: int | None
    ner_eval_examples: int | None
    ner_lr: float
    series_points: int
    """Checkpoints of the base (and LTR) run that Figure 5 fine-tunes from."""
    masking_mixes: tuple[tuple[float, float, float], ...] = MASKING_MIXES
    ner_features: tuple[str, ...] = NER_FEATURES
    table5_rows: tuple[str, ...] = ("base", "no-nsp", "no-nsp-packed", "ltr", "ltr-bilstm")
    ner_seeds: int = 1
    table8_features: str | None = "concat-last-4"
    """Table 8's feature-based NER column (the paper concatenates the last four layers); None: left out."""
    precision: str = "fp32"
    note: str = ""


PRESETS = {
    "smoke": Preset(
        "smoke", "1/64/2", ("1/64/2",), steps=10, batch_size=8, lr=1e-3, max_seq_length=64, dupe_factor=1,
        vocab_size=3000, pretrain_seeds=1, finetune_seeds=1, finetune_epochs=1, finetune_train_examples=100,
        finetune_eval_examples=100, finetune_lr=5e-4, ner_lr=1e-3, ner_epochs=1, ner_train_examples=60, ner_eval_examples=60, series_points=1,
        masking_mixes=MASKING_MIXES[:1], ner_features=("last",), table5_rows=("base", "no-nsp"),
        table8_features=None, note="two pre-training runs of 10 steps: checks the machinery, not BERT",
    ),
    "quick": Preset(
        "quick", "2/128/2", ("1/128/2", "2/128/2", "4/128/4"), steps=300, batch_size=32, lr=1e-3,
        max_seq_length=128, dupe_factor=2, vocab_size=8000, pretrain_seeds=1, finetune_seeds=2,
        finetune_epochs=3, finetune_train_examples=600, finetune_eval_examples=None, finetune_lr=1e-4, ner_lr=1e-3, ner_epochs=2,
        ner_train_examples=1000, ner_eval_examples=500, series_points=3,
        note="tiny models and a few hundred steps on a 2-core CPU: the numbers show the machinery works "
        "and the direction of some effects, at a scale where most differences are within noise",
    ),
    "paper": Preset(
        "paper", "12/768/12",
        ("3/768/12", "6/768/3", "6/768/12", "12/768/12", "12/1024/16", "24/1024/16"),
        steps=1_000_000, batch_size=256, lr=1e-4, max_seq_length=128, dupe_factor=10, vocab_size=30522,
        pretrain_seeds=1, finetune_seeds=5, finetune_epochs=3, finetune_train_examples=None,
        finetune_eval_examples=None, finetune_lr=2e-5, ner_lr=5e-5, ner_epochs=4, ner_train_examples=None, ner_eval_examples=None,
        series_points=5, precision="bf16",
        note="the paper's settings (1M steps of 256 x 128 tokens; the paper trained the last 10% at 512): "
        "a GPU cluster",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class AblationConfig:
    """Where the study runs and on what."""

    workdir: str
    preset: Preset
    wiki_dump: str | None = None
    books: str | None = None
    """A folder of plain-text books (``*.txt``) merged into the corpus, as ``make demo`` does."""
    corpus: str | None = None
    """A completed ``pipelines corpus`` output to use instead of building one from ``wiki_dump``."""
    glue_dir: str | None = None
    glue_task: str | None = None
    """The task of ``glue_dir`` (``mrpc`` when not given); refused without ``glue_dir``."""
    ner_dir: str | None = None
    """A CoNLL-2003 folder (train.txt, valid.txt) for Tables 7 and 8; None leaves NER out."""
    seed: int = 12345
    runner: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if problems := self.problems():
            raise SettingsError(problems)

    def problems(self) -> list[str]:
        """Every value or combination of values the study refuses, one line each (exit 2)."""
        found = [] if self.workdir else ["--workdir must not be empty"]
        if not (self.wiki_dump or self.corpus):
            found.append("give --wiki-dump (to build the corpus) or --corpus (a completed corpus)")
        if self.wiki_dump and self.corpus:
            found.append("give --wiki-dump or --corpus, not both")
        if self.books and self.corpus:
            found.append(
                "--books goes into the corpus the study builds; it cannot be added to a given --corpus"
            )
        p = self.preset
        found += checks.seed_problems(self.seed, max(p.pretrain_seeds, p.finetune_seeds, p.ner_seeds))
        found += checks.beam_problems(self.runner)
        found += checks.glue_problems(self.glue_dir, self.glue_task)
        return found

    def input_problems(self) -> list[str]:
        """Every input that is missing or lacks what a stage reads, one line each (exit 1)."""
        found = []
        if self.wiki_dump:
            found += checks.files_problems("--wiki-dump", self.wiki_dump)
        if self.books:
            found += checks.books_problems(self.books)
        if self.corpus:
            # vocabulary and shards read train, the held-out shards validation; the derived
            # task's training pairs come from validation and its dev pairs from test.
            splits = ("train", "validation") if self.glue_dir else ("train", "validation", "test")
            found += checks.corpus_problems(self.corpus, splits)
        if self.glue_dir:
            found += checks.glue_dir_problems(self.glue_dir, self.glue_task)
        if self.ner_dir:
            found += checks.ner_dir_problems(self.ner_dir)
        return found

    def url(self, *parts: str) -> str:
        return "/".join([self.workdir.rstrip("/"), *parts])


@dataclass(frozen=True)
class Run:
    """One pre-training run of the grid."""

    name: str
    title: str
    config: str
    seed: int
    shards: str = "pairs"
    """``pairs``, ``packed`` or a masking mix ``mask-M-K-R`` (its own shards)."""
    flags: tuple[str, ...] = ()
    series: bool = False
    """Keep every Figure-5 checkpoint."""


@dataclass(frozen=True)
class FineTune:
    """One fine-tuning run from a run's final (or Figure-5) checkpoint."""

    name: str
    run: str
    task: str
    """``glue`` or ``ner``."""
    seed: int
    step: int
    features: str | None = None
    bilstm: bool = False
    """``finetune glue --bilstm``: Table 5's "+ BiLSTM" row."""


@dataclass
class Grid:
    """The study: runs, fine-tunes and which cell of which table each one fills."""

    runs: dict[str, Run] = field(default_factory=dict)
    finetunes: dict[str, FineTune] = field(default_factory=dict)
    cells: list[dict] = field(default_factory=list)
    """``{"table", "row", "column", "finetunes" | "run"}``: what the report reads for each cell."""
    missing: dict[str, list[str]] = field(default_factory=dict)
    """Per table, rows of the paper this grid does not run, with the reason."""


def mix_name(mix: tuple[float, float, float]) -> str:
    """``mask-80-10-10`` for (0.8, 0.1, 0.1)."""
    return "mask-" + "-".join(str(round(100 * share)) for share in mix)


def _size_name(size: str) -> str:
    return "L" + size.replace("/", "-")


class _Builder:
    """Adds runs, fine-tunes and cells to a :class:`Grid`, sharing runs that coincide."""

    def __init__(self, cfg: AblationConfig):
        self.cfg, self.p, self.g = cfg, cfg.preset, Grid()
        self.pretrain_seeds = [cfg.seed + k for k in range(self.p.pretrain_seeds)]
        self.finetune_seeds = [cfg.seed + k for k in range(self.p.finetune_seeds)]
        self.ner_seeds = [cfg.seed + k for k in range(self.p.ner_seeds)]
        self.layers = int(self.p.model.split("/")[0])

    def runs(self, key: str, title: str, **kwargs) -> list[str]:
        """One run per pre-training seed (``KEY-sSEED``)."""
        names = []
        for seed in self.pretrain_seeds:
            name = f"{key}-s{seed}"
            self.g.runs.setdefault(name, Run(name, title, seed=seed, **{"config": self.p.model, **kwargs}))
            names.append(name)
        return names

    def finetunes(
        self,
        runs: list[str],
        task: str,
        features: str | None = None,
        step: int | None = None,
        bilstm: bool = False,
    ) -> list[str]:
        """Per run, one fine-tune per seed (``RUN/TASK[-FEATURES][-bilstm]-stepN-sSEED``)."""
        seeds = self.ner_seeds if task == "ner" else self.finetune_seeds
        at = step if step is not None else self.p.steps
        what = task if features is None else f"{task}-{features}"
        what += "-bilstm" if bilstm else ""
        names = []
        for run in runs:
            for seed in seeds:
                name = f"{run}/{what}-step{at}-s{seed}"
                self.g.finetunes.setdefault(name, FineTune(name, run, task, seed, at, features, bilstm))
                names.append(name)
        return names

    def cell(self, table: str, row: str, column: str, finetunes: list[str]) -> None:
        self.g.cells.append({"table": table, "row": row, "column": column, "finetunes": finetunes})

    def features_fit(self, features: str | None) -> bool:
        """Whether a ``--features`` mode fits the base model (the ``-4`` ones need 4 layers)."""
        return bool(features) and (self.layers >= 4 or not features.endswith("-4"))


def _table5(b: _Builder, base: list[str]) -> None:
    def ltr() -> list[str]:
        return b.runs("ltr", "left-to-right LM", flags=("--objective", "ltr"), series=True)

    rows = {  # key: (the paper's row, its runs, fine-tuned with --bilstm)
        "base": ("BERT_BASE", lambda: base, False),
        "no-nsp": ("No NSP", lambda: b.runs("no-nsp", "MLM only", flags=("--no-nsp",)), False),
        "no-nsp-packed": (
            "No NSP, packed sentences (ours)",
            lambda: b.runs("no-nsp-packed", "MLM only, packed", shards="packed", flags=("--no-nsp",)),
            False,
        ),
        "ltr": ("LTR & No NSP", ltr, False),
        "ltr-bilstm": ("+ BiLSTM", ltr, True),  # the LTR run, a fresh BiLSTM under the classifier
    }
    for key in b.p.table5_rows:
        row, make, bilstm = rows[key]
        b.cell("5", row, "task", b.finetunes(make(), "glue", bilstm=bilstm))
    b.g.missing["5"] = ["SQuAD column: the study fine-tunes on the GLUE-layout task only"]


def _table6(b: _Builder, base: list[str]) -> None:
    for size in b.p.sizes:
        runs = base if size == b.p.model else b.runs(_size_name(size), f"size {size}", config=size)
        b.cell("6", size, "task", b.finetunes(runs, "glue"))
        b.g.cells.append({"table": "6", "row": size, "column": "ppl", "runs": runs})


def _table7(b: _Builder, base: list[str]) -> None:
    if not b.cfg.ner_dir:
        b.g.missing["7"] = ["every row: no --ner-dir (a CoNLL-2003 folder) was given"]
        return
    b.cell("7", "Fine-tuning: BERT_BASE", "ner", b.finetunes(base, "ner"))
    b.g.missing["7"] = ["Fine-tuning: BERT_LARGE (the study pre-trains one base size)"]
    for features in b.p.ner_features:
        if b.features_fit(features):
            b.cell("7", f"Feature-based: {features}", "ner", b.finetunes(base, "ner", features))
        else:
            b.g.missing["7"].append(
                f"Feature-based: {features} (needs 4 layers; the base model has {b.layers})"
            )


def _table8(b: _Builder, base: list[str]) -> None:
    features = b.p.table8_features
    for mix in b.p.masking_mixes:
        runs = (
            base
            if mix == (0.8, 0.1, 0.1)
            else b.runs(mix_name(mix), f"masking {mix_name(mix)}", shards=mix_name(mix))
        )
        row = " / ".join(f"{round(100 * s)}%" for s in mix)
        b.cell("8", row, "task", b.finetunes(runs, "glue"))
        if b.cfg.ner_dir:
            b.cell("8", row, "ner", b.finetunes(runs, "ner"))
            if b.features_fit(features):
                b.cell("8", row, "ner-features", b.finetunes(runs, "ner", features))
    if not b.cfg.ner_dir:
        b.g.missing["8"] = ["NER columns: no --ner-dir (a CoNLL-2003 folder) was given"]
    elif features and not b.features_fit(features):
        b.g.missing["8"] = [
            f"NER feature-based column: {features} needs 4 layers; the base model has {b.layers}"
        ]


def grid(cfg: AblationConfig) -> Grid:
    """Every run and fine-tune of the preset, and the cells they fill."""
    b = _Builder(cfg)
    base = b.runs("base", "BERT_BASE: MLM + NSP", series=True)
    for table in (_table5, _table6, _table7, _table8):
        table(b, base)
    for run in ("base", "ltr"):
        key = f"{run}-s{b.pretrain_seeds[0]}"
        if key in b.g.runs:
            for step in series_steps(b.p):
                b.cell("fig5", key, str(step), b.finetunes([key], "glue", step=step))
    return b.g


def series_steps(p: Preset) -> list[int]:
    """The checkpoints Figure 5 fine-tunes from: ``series_points`` evenly spaced, the last the final."""
    every = max(1, p.steps // p.series_points)
    return sorted({min(p.steps, every * k) for k in range(1, p.series_points + 1)} | {p.steps})


def chain_config(cfg: AblationConfig) -> ChainConfig:
    """The demo chain's settings for the shared stages (corpus, vocabulary, shards, task)."""
    p = cfg.preset
    return ChainConfig(
        workdir=cfg.workdir, wiki_dump=cfg.wiki_dump or "", books=cfg.books, glue_dir=cfg.glue_dir, glue_task=cfg.glue_task,
        vocab_size=p.vocab_size, max_seq_length=p.max_seq_length, dupe_factor=p.dupe_factor, model=p.model,
        pretrain_steps=p.steps, batch_size=p.batch_size, precision=p.precision, seed=cfg.seed, runner=cfg.runner,
    )  # fmt: skip


SHARED_STAGES = ("wikipedia", "books", "corpus", "vocab", "examples", "examples-validation", "task")
"""The demo chain's stages the study builds on (``books`` only with ``--books``, as in the demo)."""


def _replace_arg(command: list[str], flag: str, value: str) -> list[str]:
    out = list(command)
    out[out.index(flag) + 1] = value
    return out


def shared_stages(cfg: AblationConfig) -> tuple[list[Stage], dict[str, str]]:
    """The corpus, vocabulary, shards and task stages (the demo chain's), and where their outputs are."""
    chain = chain_config(cfg)
    stages = [s for s in plan(chain) if s.name in SHARED_STAGES]
    corpus = chain.url("corpus", "all")
    if cfg.corpus:
        from chain.task import write_task

        corpus = cfg.corpus.rstrip("/")
        stages = [s for s in stages if s.name not in ("wikipedia", "books", "corpus")]
        for stage in stages:
            if stage.command:
                stage.command = [corpus if a == chain.url("corpus", "all") else a for a in stage.command]
            stage.upstream = tuple(u for u in stage.upstream if u != "corpus")
            if stage.name == "task":
                out = stage.output
                stage.action = lambda out=out: {"task": write_task(corpus, out, seed=cfg.seed)}
                stage.info = {"seed": cfg.seed, "corpus": corpus}
    where = {
        "corpus": corpus,
        "vocab": chain.url("vocab"),
        "pairs": chain.url("shards", f"seq{chain.max_seq_length}"),
        "validation": chain.url("shards", f"seq{chain.max_seq_length}-validation"),
        "task_dir": cfg.glue_dir or chain.url("tasks", "next-sentence"),
        "task": chain.task,
    }
    return stages, where


def _example_variant(base: Stage, name: str, output: str, flags: list[str]) -> Stage:
    command = _replace_arg(base.command, "--output", output) + flags
    return Stage(
        f"ablate/examples-{name}", f"pipelines examples: {name} train shards", output, command,
        done=lambda: exists(f"{output}/COMPLETED"), upstream=base.upstream,
    )  # fmt: skip


def _pretrain_stage(cfg: AblationConfig, run: Run, shards: str, validation: str, upstream: str) -> Stage:
    p = cfg.preset
    out = cfg.url("ablations", "runs", run.name)
    every = max(1, p.steps // p.series_points) if run.series else p.steps
    keep = p.series_points + 1 if run.series else 1
    command = [
        script("pretrain"), "--shards", shards, "--validation-shards", validation, "--config", run.config,
        "--output", out, "--global-batch-size", str(p.batch_size), "--max-steps", str(p.steps), "--lr", str(p.lr),
        "--warmup-steps", str(max(1, p.steps // 10)), "--precision", p.precision, "--save-steps", str(every),
        "--keep-checkpoints", str(keep), "--log-steps", str(max(1, p.steps // 10)), "--eval-steps", "0",
        "--eval-batches", "20", "--num-workers", "0", "--seed", str(run.seed), "--overwrite", *run.flags,
    ]  # fmt: skip
    final = f"{out}/checkpoints/step-{p.steps:08d}/COMMITTED"

    def resume() -> list[str] | None:
        return (
            [script("pretrain"), "--resume", out, "--shards", shards]
            if exists(f"{out}/checkpoints")
            else None
        )

    return Stage(
        f"ablate/pretrain/{run.name}", f"pretrain {run.name}: {run.title}, {run.config}", out, command,
        done=lambda: exists(final), upstream=(upstream, "examples-validation"), resume=resume,
    )  # fmt: skip


def _finetune_stage(cfg: AblationConfig, ft: FineTune, where: dict[str, str]) -> Stage:
    p = cfg.preset
    checkpoint = cfg.url("ablations", "runs", ft.run, "checkpoints", f"step-{ft.step:08d}")
    out = cfg.url("ablations", "finetune", ft.name)
    if ft.task == "glue":
        command = [
            script("finetune"), "glue", "--task", where["task"], "--data-dir", where["task_dir"],
            "--checkpoint", checkpoint, "--output", out, "--epochs", str(p.finetune_epochs), "--lr", str(p.finetune_lr),
            "--batch-size", "32", "--max-seq-length", "128", "--seed", str(ft.seed), "--no-test-predictions",
            "--no-save-model", "--overwrite", *(["--bilstm"] if ft.bilstm else []),
        ]  # fmt: skip
        limit = p.finetune_train_examples
        if p.finetune_eval_examples:
            command += ["--max-eval-examples", str(p.finetune_eval_examples)]
        upstream: tuple[str, ...] = () if cfg.glue_dir else ("task",)
    else:
        command = [
            script("finetune"), "ner", "--data-dir", cfg.ner_dir or "", "--checkpoint", checkpoint,
            "--output", out, "--epochs", str(p.ner_epochs), "--batch-size", "32", "--max-seq-length", "128",
            "--seed", str(ft.seed), "--overwrite",
        ]  # fmt: skip
        command += ["--features", ft.features, "--cache-features"] if ft.features else ["--lr", str(p.ner_lr)]
        limit = p.ner_train_examples
        if p.ner_eval_examples:
            command += ["--max-eval-examples", str(p.ner_eval_examples)]
        upstream = ()
    if limit:
        command += ["--max-train-examples", str(limit)]
    return Stage(
        f"ablate/finetune/{ft.name}", f"finetune {ft.task} {ft.name}", out, command,
        done=lambda: exists(f"{out}/metrics.json"), upstream=(f"ablate/pretrain/{ft.run}", *upstream),
    )  # fmt: skip


def stages(cfg: AblationConfig, g: Grid) -> list[Stage]:
    """Every stage of the study, shared ones first; a rerun skips what finished (``chain.run``)."""
    shared, where = shared_stages(cfg)
    examples = next(s for s in shared if s.name == "examples")
    variants: dict[str, tuple[str, str]] = {"pairs": (where["pairs"], "examples")}
    out: list[Stage] = list(shared)
    for run in g.runs.values():
        if run.shards in variants:
            continue
        folder = cfg.url("ablations", "shards", f"{run.shards}-seq{cfg.preset.max_seq_length}")
        if run.shards == "packed":
            flags = ["--format", "packed"]
        else:
            mask, keep, rand = (int(x) / 100 for x in run.shards.split("-")[1:])
            flags = ["--mask-share", str(mask), "--keep-share", str(keep), "--random-share", str(rand)]
        stage = _example_variant(examples, run.shards, folder, flags)
        variants[run.shards] = (folder, stage.name)
        out.append(stage)
    # Each run's GLUE-layout fine-tunes right after it, the NER ones (slower) at the end, so a
    # study stopped early has whole rows of Tables 5, 6 and 8.
    for run in g.runs.values():
        shards, upstream = variants[run.shards]
        out.append(_pretrain_stage(cfg, run, shards, where["validation"], upstream))
        out += [
            _finetune_stage(cfg, ft, where)
            for ft in g.finetunes.values()
            if ft.run == run.name and ft.task == "glue"
        ]
    out += [_finetune_stage(cfg, ft, where) for ft in g.finetunes.values() if ft.task == "ner"]
    return out


def with_preset(cfg: AblationConfig, **changes) -> AblationConfig:
    """``cfg`` with its preset's fields changed (tests make tiny studies this way)."""
    return replace(cfg, preset=replace(cfg.preset, **changes))
