"""The GLUE classifier as a saved, reloadable model: ``finetune glue`` writes the selected run's
model into ``OUT/model/`` (transformers' ``BertForSequenceClassification`` layout: ``bert.*`` and
``classifier.*``, plus ``bilstm.*`` with ``--bilstm``; ``config.json`` with ``id2label`` and
``finetuning_task``), and giving that folder as ``--checkpoint`` restores the head as well as the
encoder (``--predict-only`` then evaluates and predicts without training).

``--bilstm`` is the paper's "+ BiLSTM" (Table 5): a randomly initialised one-layer BiLSTM, the
encoder's hidden size per direction, between the encoder and the classifier; the same
:class:`finetune.heads.BiLSTM` as ``finetune squad --bilstm``.
"""

from __future__ import annotations

from finetune.common import Encoder, FinetuneError, SequenceClassifier, save_model
from finetune.heads import BiLSTM
from pretrain import hf
from pretrain.model import BertModel

MODEL_FOLDER = "model"
"""Where ``run_glue`` saves the selected run's model in ``--output``."""
HEAD_PREFIXES = ("classifier.", "bilstm.")


def build_classifier(encoder: BertModel, num_labels: int, *, seed: int, bilstm: bool) -> SequenceClassifier:
    """The task model of one run: the classifier from ``seed``, the BiLSTM (when ``bilstm``) from
    ``seed + 1``, as ``finetune squad --bilstm`` seeds its own."""
    hidden = encoder.config.hidden_size
    lstm = BiLSTM(hidden, hidden, num_layers=1, seed=seed + 1) if bilstm else None
    return SequenceClassifier(encoder, num_labels, seed=seed, bilstm=lstm)


def save_classifier(
    model: SequenceClassifier, encoder: Encoder, folder: str, task: str, labels: tuple[str, ...] | None
) -> None:
    """Write ``model`` into ``folder`` (:func:`finetune.common.save_model`) with the task's name
    and labels (None: regression)."""
    names = labels or ("score",)
    save_model(
        model,
        encoder,
        folder,
        architectures=["BertForSequenceClassification"],
        finetuning_task=task,
        id2label={str(i): label for i, label in enumerate(names)},
        label2id={label: i for i, label in enumerate(names)},
        problem_type="regression" if labels is None else "single_label_classification",
        bilstm=model.bilstm is not None,
    )


def head_weights(checkpoint: str, task: str, num_labels: int, *, bilstm: bool) -> dict | None:
    """The classifier (and BiLSTM) weights saved in ``checkpoint`` for ``task`` (its name), or None
    when it holds no classifier (a pre-trained encoder). Raises :class:`FinetuneError` when the
    head was trained for another task, has another number of outputs than ``num_labels``, or was
    trained with(out) a BiLSTM against ``bilstm``."""
    names = hf.tensor_names(checkpoint)
    if names is not None and "classifier.weight" not in names:
        return None  # a pre-trained encoder: its weights are not read a second time
    weights, source = hf.read_weights(checkpoint)
    head = {k: v for k, v in weights.items() if k.startswith(HEAD_PREFIXES)}
    if "classifier.weight" not in head:
        return None
    config, config_file = hf.read_config(checkpoint)
    trained_for = config.get("finetuning_task")
    if trained_for is not None and str(trained_for).lower().replace("-", "") != task:
        raise FinetuneError(
            f"{config_file}: its classifier was fine-tuned on {trained_for}, not {task}: "
            "give --task " + str(trained_for) + " or a pre-trained checkpoint"
        )
    has_bilstm = any(k.startswith("bilstm.") for k in head)
    if has_bilstm != bilstm:
        raise FinetuneError(
            f"{source}: its classifier was trained {'with' if has_bilstm else 'without'} a BiLSTM: "
            f"{'give' if has_bilstm else 'leave out'} --bilstm to use it"
        )
    rows = head["classifier.weight"].shape[0]
    if rows != num_labels:
        raise FinetuneError(
            f"{source}: its classifier has {rows} outputs, {task} needs {num_labels}: "
            "give a checkpoint fine-tuned on this task, or a pre-trained one"
        )
    return head


def load_head(model: SequenceClassifier, head: dict, source: str) -> None:
    """Copy the saved ``head`` (:func:`head_weights`) into ``model``."""
    state = model.state_dict()
    own = {k for k in state if k.startswith(HEAD_PREFIXES)}
    if set(head) != own:
        raise FinetuneError(
            f"{source}: its classifier's tensors ({', '.join(sorted(head))}) do not fit this model's "
            f"({', '.join(sorted(own))})"
        )
    try:
        model.load_state_dict({**state, **head})
    except RuntimeError as err:
        raise FinetuneError(f"{source}: its classifier does not fit this model: {err}") from None
