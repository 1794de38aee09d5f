"""The pre-trained encoder a fine-tuning run starts from: loaded from a ``pretrain`` run or an HF
BERT folder with its vocabulary and casing, checked against a run's settings and texts, and a
fine-tuned model saved back as a BERT folder."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import safetensors.torch
import torch
from torch import nn

from finetune.config import FitConfig
from finetune.inputs import input_json
from pretrain import checkpoint as ckpt
from pretrain import hf
from pretrain.model import BertForPreTraining, BertModel
from schemas import storage
from schemas.commands import InputError
from schemas.inputs import boolean
from wordpiece.tokenizer import UNK_WARN_SHARE, WordPieceTokenizer

logger = logging.getLogger(__name__)


@dataclass
class Encoder:
    """A pre-trained BERT encoder, its tokenizer and the folder of its weights."""

    model: BertModel
    tokenizer: WordPieceTokenizer
    cased: bool
    source: str

    @property
    def max_positions(self) -> int:
        """The longest sequence the encoder accepts (``max_position_embeddings``)."""
        return self.model.config.max_position_embeddings


def _recorded_casing(folder: str) -> bool | None:
    """The casing ``trainer.json`` (ours) or ``tokenizer_config.json`` (HF) records, else None."""
    for name, key in ((f"{ckpt.TRAINER_STATE}.json", "cased"), (hf.TOKENIZER_CONFIG_FILE, "do_lower_case")):
        where = f"{folder}/{name}"
        value = boolean(input_json(where), key, where, default=None) if storage.exists(where) else None
        if value is not None:
            return value if key == "cased" else not value
    return None


def load_encoder(checkpoint: str, *, cased: bool | None = None, seed: int = 0) -> Encoder:
    """Load ``--checkpoint``: a ``pretrain`` run folder (newest complete checkpoint), a checkpoint
    folder ``RUN/checkpoints/step-N``, or an HF-format BERT folder (``config.json``, weights,
    ``vocab.txt``); local or a bucket URL. ``cased=None`` takes the casing the checkpoint records,
    else infers it from the vocabulary. A missing pooler is initialised from ``seed``."""
    url = ckpt.weights_folder(checkpoint)
    try:
        hf.check_vocab_rows(url)
        model = BertForPreTraining.from_pretrained(url, seed=seed)
    except ValueError as err:
        raise InputError(f"--checkpoint {checkpoint}: {err}") from None
    vocab_url = f"{url}/{hf.VOCAB_FILE}"
    if not storage.exists(vocab_url):
        raise InputError(
            f"{vocab_url} not found: --checkpoint needs the vocabulary the model was trained with "
            "(a pretrain checkpoint or an HF BERT folder with vocab.txt)"
        )
    tokenizer = WordPieceTokenizer.load(vocab_url, cased=_recorded_casing(url) if cased is None else cased)
    if tokenizer.vocab_size != model.config.vocab_size:
        raise InputError(
            f"{vocab_url} has {tokenizer.vocab_size} tokens but {url}/config.json says vocab_size "
            f"{model.config.vocab_size}: the vocabulary is not the one this model was trained with"
        )
    return Encoder(model.bert, tokenizer, tokenizer.cased, url)


def read_head(source: str, prefixes: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The tensors of a task head saved in ``source`` (named ``prefixes``); empty for an encoder alone."""
    try:
        names = hf.tensor_names(source)
        if names is not None and not any(n.startswith(prefixes) for n in names):
            return {}
        weights, _ = hf.read_weights(source)
    except ValueError as err:
        raise InputError(str(err)) from None
    return {k: v for k, v in weights.items() if k.startswith(prefixes)}


CASING_SAMPLE = 200  # the first texts of the training data check_casing tokenises


def unknown_share(tokenizer: WordPieceTokenizer, texts: Sequence[str]) -> float:
    """The share of ``[UNK]`` among the tokens of ``texts`` (0 without tokens)."""
    ids = [i for row in tokenizer.encode_batch(list(texts)) for i in row]
    return ids.count(tokenizer.token_to_id("[UNK]")) / len(ids) if ids else 0.0


def check_casing(encoder: Encoder, texts: Sequence[str]) -> float:
    """Warn, with both figures, when the encoder's casing gives over
    :data:`~wordpiece.tokenizer.UNK_WARN_SHARE` ``[UNK]`` on the first texts and twice the other
    casing's (then the casing is wrong). Returns the share."""
    sample = [t for t in texts[:CASING_SAMPLE] if t]
    tokenizer = encoder.tokenizer
    share = unknown_share(tokenizer, sample)
    if share > UNK_WARN_SHARE:
        other = unknown_share(WordPieceTokenizer(tokenizer.vocab, not tokenizer.cased), sample)
        if share >= 2 * other:
            chosen, flip = ("--cased", "--uncased") if tokenizer.cased else ("--uncased", "--cased")
            logger.warning(
                "%s: %.1f%% of the tokens of %d training texts are [UNK] with the vocabulary of %s, "
                "%.1f%% with %s: the casing does not fit the vocabulary; check --cased/--uncased",
                *(chosen, 100 * share, len(sample), encoder.source, 100 * other, flip),
            )
    return share


def prepare_encoder(checkpoint: str, config: FitConfig, texts: Sequence[str]) -> Encoder:
    """:func:`load_encoder` for a run, checked against its ``max_seq_length`` and its training ``texts``."""
    encoder = load_encoder(checkpoint, cased=config.cased, seed=config.seed)
    if config.max_seq_length > encoder.max_positions:
        raise InputError(
            f"--max-seq-length {config.max_seq_length} is more than the model's "
            f"max_position_embeddings ({encoder.max_positions}); lower it"
        )
    check_casing(encoder, texts)
    return encoder


def save_model(model: nn.Module, encoder: Encoder, folder: storage.Folder, **config_updates: Any) -> None:
    """Write a fine-tuned ``model`` into ``folder`` as a BERT folder, its config with ``config_updates``."""
    config, _ = hf.read_config(encoder.source)
    vocab_size = model.bert.config.vocab_size
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "bert.embeddings.word_embeddings.weight":
            tensor = tensor[:vocab_size]
        state[name] = tensor.detach().to("cpu", copy=True).contiguous()
    folder.write(hf.VOCAB_FILE, storage.read_bytes(f"{encoder.source.rstrip('/')}/{hf.VOCAB_FILE}"))
    folder.write(hf.SAFETENSORS_FILE, safetensors.torch.save(state, metadata={"format": "pt"}))
    folder.write_json(hf.CONFIG_FILE, {**config, **config_updates}, sort_keys=True)
    folder.write_json(hf.TOKENIZER_CONFIG_FILE, {"do_lower_case": not encoder.cased}, sort_keys=True)
