"""GLUE: a task's official folder read (its row of :mod:`finetune.glue_tasks`), its runs trained and
scored, the GLUE server's submission files, and the fine-tuned classifier saved as a model.

Files are UTF-8 (a leading BOM dropped), rows split on ``\n`` only (a form feed or Unicode line
separator in a sentence is text), fields on tabs with no CSV quoting; columns are found by header
name; a missing column or a label outside the task's set names the file and line.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from finetune import metrics as M
from finetune.config import FitConfig
from finetune.encoder import Encoder, prepare_encoder, read_head, save_model
from finetune.glue_tasks import GlueExample, GlueTask, get_task, read_task, score
from finetune.heads import BiLSTM, Classifier
from finetune.inputs import check_examples
from finetune.loop import fit, predict_classes
from finetune.sequences import encode_pair
from pretrain import hf
from pretrain.model import BertModel
from schemas import storage
from schemas.commands import InputError, seed_problems

logger = logging.getLogger(__name__)


GRID = {"batch_size": (16, 32), "lr": (5e-5, 3e-5, 2e-5), "epochs": (2, 3, 4)}  # paper, Appendix A.3
MAX_SEEDS = 100
MODEL_FOLDER = "model"
HEAD_PREFIXES = ("classifier.", "bilstm.")


@dataclass(frozen=True)
class GlueConfig(FitConfig):
    """A GLUE run: the fit settings, ``num_seeds`` runs per setting, the paper's ``grid``, ``bilstm``
    (Table 5's "+ BiLSTM"), and what to predict and save."""

    num_seeds: int = 1
    grid: bool = False
    bilstm: bool = False
    test_predictions: bool = True
    predict_only: bool = False
    save_model: bool = True

    def problems(self) -> list[str]:
        """:meth:`FitConfig.problems` and the seeds'."""
        found = super().problems()
        if not 1 <= self.num_seeds <= MAX_SEEDS:
            found.append(f"--seeds must be between 1 and {MAX_SEEDS}, got {self.num_seeds}")
        elif not seed_problems(self.seed):
            found += seed_problems(self.seed, self.num_seeds, f"--seed (with --seeds {self.num_seeds})")
        if self.predict_only and (self.grid or self.num_seeds > 1):
            found.append("--predict-only trains nothing: leave out --grid and --seeds")
        return found


def features(
    task: GlueTask, examples: Sequence[GlueExample], encoder: Encoder, max_seq_length: int
) -> list[dict]:
    """Token ids per example, and ``labels`` (class index, or the score) when labelled."""
    result = []
    for example in examples:
        feature: dict[str, Any] = encode_pair(
            encoder.tokenizer, example.text_a, example.text_b, max_seq_length
        )
        if example.label is not None:
            feature["labels"] = _label_values(task, [example])[0]
        result.append(feature)
    return result


def _label_values(task: GlueTask, examples: Sequence[GlueExample]) -> list:
    if task.labels is None:
        return [float(e.label) for e in examples]
    return [task.labels.index(str(e.label)) for e in examples]


def to_predictions(task: GlueTask, logits: torch.Tensor) -> list:
    """Class indices (argmax), or scores clipped to [0, 5] for STS-B."""
    if task.labels is None:
        return [min(5.0, max(0.0, float(v))) for v in logits]
    return logits.argmax(-1).tolist()


def prediction_strings(task: GlueTask, predictions: Sequence) -> list[str]:
    """What the GLUE server expects in the prediction column: the label string, or the score."""
    if task.labels is None:
        return [f"{p:.3f}" for p in predictions]
    return [task.labels[p] for p in predictions]


def majority_baseline(
    task: GlueTask, train: Sequence[GlueExample], dev: Sequence[GlueExample]
) -> dict[str, float]:
    """The metrics of always predicting the most common training label (mean score for STS-B)."""
    labels = _label_values(task, dev)
    if task.labels is None:
        mean = sum(float(e.label) for e in train) / len(train)
        return {"mse": sum((mean - y) ** 2 for y in labels) / len(labels)}
    counts = [sum(e.label == label for e in train) for label in task.labels]
    return score(task, [counts.index(max(counts))] * len(labels), labels)


def build_classifier(encoder: BertModel, num_labels: int, *, seed: int, bilstm: bool) -> Classifier:
    """The task model of one run: the classifier from ``seed``, the one-layer BiLSTM from ``seed + 1``."""
    hidden = encoder.config.hidden_size
    lstm = BiLSTM(hidden, hidden, num_layers=1, seed=seed + 1) if bilstm else None
    return Classifier(encoder, num_labels, seed=seed, bilstm=lstm)


def head_weights(checkpoint: str, task: GlueTask, *, bilstm: bool) -> dict | None:
    """The classifier (and BiLSTM) saved in ``checkpoint`` for ``task`` (None: a pre-trained encoder)."""
    head = read_head(checkpoint, HEAD_PREFIXES)
    if "classifier.weight" not in head:
        return None
    config, config_file = hf.read_config(checkpoint)
    trained_for = str(config.get("finetuning_task", task.name))
    if trained_for.lower().replace("-", "") != task.name:
        raise InputError(
            f"{config_file}: its classifier was fine-tuned on {trained_for}, not {task.name}: "
            f"give --task {trained_for} or a pre-trained checkpoint"
        )
    has_bilstm = any(k.startswith("bilstm.") for k in head)
    if has_bilstm != bilstm:
        raise InputError(
            f"{checkpoint}: its classifier was trained {'with' if has_bilstm else 'without'} a BiLSTM: "
            f"{'give' if has_bilstm else 'leave out'} --bilstm to use it"
        )
    if head["classifier.weight"].shape[0] != task.num_labels:
        raise InputError(
            f"{checkpoint}: its classifier has {head['classifier.weight'].shape[0]} outputs, {task.name} "
            f"needs {task.num_labels}: give a checkpoint fine-tuned on this task, or a pre-trained one"
        )
    return head


def load_head(model: Classifier, head: dict, source: str) -> None:
    """Copy the saved ``head`` (:func:`head_weights`) into ``model``."""
    own = {k for k in model.state_dict() if k.startswith(HEAD_PREFIXES)}
    try:
        if set(head) != own:
            raise RuntimeError(f"tensors {', '.join(sorted(head))}, not {', '.join(sorted(own))}")
        model.load_state_dict(head, strict=False)
    except RuntimeError as err:
        raise InputError(f"{source}: its classifier does not fit this model: {err}") from None


def save_classifier(model: Classifier, encoder: Encoder, folder: storage.Folder, task: GlueTask) -> None:
    """Write ``model`` into ``folder`` as transformers' ``BertForSequenceClassification``."""
    names = list(task.labels) if task.labels is not None else ["score"]
    save_model(
        model,
        encoder,
        folder,
        architectures=["BertForSequenceClassification"],
        finetuning_task=task.name,
        id2label={str(i): label for i, label in enumerate(names)},
        label2id={label: i for i, label in enumerate(names)},
        problem_type="regression" if task.labels is None else "single_label_classification",
        bilstm=model.bilstm is not None,
    )


def run_configs(base: GlueConfig) -> list[list[GlueConfig]]:
    """The runs to make, grouped by setting (the paper's grid with ``grid``), each over the seeds."""
    settings = [dict(zip(GRID, values, strict=True)) for values in itertools.product(*GRID.values())]
    return [
        [dataclasses.replace(base, **s, seed=base.seed + k) for k in range(base.num_seeds)]
        for s in (settings if base.grid else [{}])
    ]


def _run_name(config: FitConfig) -> str:
    return f"bs{config.batch_size}-lr{config.lr:g}-ep{config.epochs:g}-seed{config.seed}"


@dataclass
class _Run:
    """One trained run: its record in metrics.json, its dev predictions and (the best) its CPU weights."""

    record: dict[str, Any]
    predictions: dict[str, list]
    state: dict | None = None


def run_glue(
    task_name: str,
    data_dir: str,
    checkpoint: str,
    out: storage.Folder,
    config: GlueConfig,
    *,
    diagnostic_file: str | None = None,
    before_training: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` on one GLUE task: one run, several seeds (mean ± sd) or the paper's
    grid (Appendix A.3), selected on dev. The selected setting's best seed predicts dev and test
    (the GLUE server's files) and is saved in ``out``'s ``model/`` (``BertForSequenceClassification``'s
    layout); returns ``metrics.json``. ``predict_only``: the classifier in ``checkpoint`` instead.
    ``before_training`` (``--overwrite``'s clean-up) runs once every check has passed."""
    task = get_task(task_name)
    data = read_task(task, data_dir, diagnostic_file=diagnostic_file, with_test=config.test_predictions)
    train = data.train[: config.max_train_examples]
    dev = {stem: examples[: config.max_eval_examples] for stem, examples in data.dev.items()}
    for stem, examples in dev.items():
        check_examples(examples, f"{data_dir.rstrip('/')}/{stem}.tsv")
    if not config.predict_only:
        check_examples(train, f"{data_dir.rstrip('/')}/train.tsv")
    encoder = prepare_encoder(checkpoint, config, [e.text_a for e in train or next(iter(dev.values()))])
    head = head_weights(encoder.source, task, bilstm=config.bilstm)
    if config.predict_only and head is None:
        raise InputError(
            f"--predict-only needs a fine-tuned classifier in --checkpoint; {encoder.source} has none "
            "(give the model/ folder of an earlier `finetune glue` run)"
        )
    train_features = [] if config.predict_only else features(task, train, encoder, config.max_seq_length)
    dev_features = {stem: features(task, v, encoder, config.max_seq_length) for stem, v in dev.items()}
    if before_training is not None:
        before_training()

    def evaluate(model: torch.nn.Module, run: GlueConfig) -> _Run:
        values, predictions = {}, {}
        for stem, prefix in task.dev.items():
            predictions[stem] = to_predictions(task, predict_classes(model, dev_features[stem], run))
            values |= score(task, predictions[stem], _label_values(task, dev[stem]), prefix)
        return _Run({"name": _run_name(run), "config": run.to_dict(), "dev": values}, predictions)

    model = build_classifier(encoder.model, task.num_labels, seed=config.seed, bilstm=config.bilstm)
    if config.predict_only:
        load_head(model, head, encoder.source)
        kept = evaluate(model, config)
        chosen = {"dev": kept.record["dev"], "dev_sd": dict.fromkeys(kept.record["dev"], 0.0), "runs": []}
    else:
        model, kept, chosen = _train(task, encoder, train_features, evaluate, head, config, out)
    files = _write_predictions(task, out, model, config, encoder, dev, kept.predictions, data.test)
    if config.save_model:
        save_classifier(model, encoder, out.sub(MODEL_FOLDER), task)
        files.append(f"{MODEL_FOLDER}/")
    result = {
        "task": task.name,
        "checkpoint": encoder.source,
        "main_metric": task.main_metric,
        **chosen,
        "num_seeds": config.num_seeds,
        "grid": config.grid,
        "trained": not config.predict_only,
        "head": "from the checkpoint" if head is not None else "fresh",
        "bilstm": config.bilstm,
        "majority_baseline": {stem: majority_baseline(task, train, v) for stem, v in dev.items() if train},
        "num_examples": {"train": len(train), **{stem: len(v) for stem, v in dev.items()}},
        "max_seq_length": config.max_seq_length,
        "files": files,
    }
    out.write_json("metrics.json", result, sort_keys=True)
    return result


def _train(
    task: GlueTask,
    encoder: Encoder,
    train_features: list[dict],
    evaluate: Callable[[torch.nn.Module, GlueConfig], _Run],
    head: dict | None,
    config: GlueConfig,
    out: storage.Folder,
) -> tuple[Classifier, _Run, dict[str, Any]]:
    """Train every run of every setting from the same weights; return the best seed of the best setting
    (by its mean), its run, and the metrics.json entries."""
    main = task.main_metric
    groups = run_configs(config)
    pretrained = copy.deepcopy(encoder.model.state_dict())
    runs, summaries, best = [], [], {}
    for group in groups:
        group_best = None
        for run in group:
            encoder.model.load_state_dict(pretrained)
            model = build_classifier(encoder.model, task.num_labels, seed=run.seed, bilstm=config.bilstm)
            if head is not None:
                load_head(model, head, encoder.source)
            logger.info("%s: training %s on %d examples", task.name, _run_name(run), len(train_features))
            trained = fit(model, train_features, run)
            result = evaluate(model, run)
            result.record["train"] = trained.to_dict()
            if len(groups) * len(group) > 1:
                out.write_json(f"runs/{result.record['name']}/metrics.json", result.record, sort_keys=True)
            runs.append(result.record)
            logger.info("%s: %s dev %s", task.name, result.record["name"], result.record["dev"])
            if group_best is None or result.record["dev"][main] > group_best.record["dev"][main]:
                result.state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                group_best = result
        summary = _summarise(runs[-len(group) :])
        if not summaries or summary["dev_mean"][main] > max(s["dev_mean"][main] for s in summaries):
            best = {"summary": summary, "run": group_best}
        summaries.append(summary)
    model.load_state_dict(best["run"].state)
    chosen = {
        "dev": best["summary"]["dev_mean"],
        "dev_sd": best["summary"]["dev_sd"],
        "selected": best["summary"]["setting"],
        "selected_run": best["run"].record["name"],
        "settings": summaries,
        "runs": runs,
    }
    return model, best["run"], chosen


def _summarise(group_runs: list[dict[str, Any]]) -> dict[str, Any]:
    config = group_runs[0]["config"]
    stats = {k: M.mean_and_sd([r["dev"][k] for r in group_runs]) for k in group_runs[0]["dev"]}
    return {
        "setting": {k: config[k] for k in ("batch_size", "lr", "epochs")},
        "runs": [r["name"] for r in group_runs],
        "dev_mean": {k: v[0] for k, v in stats.items()},
        "dev_sd": {k: v[1] for k, v in stats.items()},
    }


def _write_predictions(
    task: GlueTask,
    out: storage.Folder,
    model: torch.nn.Module,
    config: GlueConfig,
    encoder: Encoder,
    dev: dict[str, list[GlueExample]],
    dev_predictions: dict[str, list],
    test: dict[str, list[GlueExample]],
) -> list[str]:
    """The dev splits' ``<stem>_predictions.tsv`` and the GLUE server's test files; returns their names."""
    written = []
    for stem, examples in dev.items():
        strings = prediction_strings(task, dev_predictions[stem])
        rows = [f"{e.index}\t{p}\t{e.label}\n" for e, p in zip(examples, strings, strict=True)]
        out.write(f"{stem}_predictions.tsv", "index\tprediction\tlabel\n" + "".join(rows))
        written.append(f"{stem}_predictions.tsv")
    for stem, examples in test.items():
        name = task.diagnostic if stem == "diagnostic" else task.test[stem]
        logits = predict_classes(model, features(task, examples, encoder, config.max_seq_length), config)
        strings = prediction_strings(task, to_predictions(task, logits))
        rows = [f"{e.index}\t{p}\n" for e, p in zip(examples, strings, strict=True)]
        out.write(name, "index\tprediction\n" + "".join(rows))
        written.append(name)
    return written
