"""What a pre-training run checks and builds before its first step.

The torchrun process group (:class:`Processes`), and :func:`prepare`: the model (new, from
``--init-from``, or the one ``--resume`` continues), the vocabulary and the saved trainer state,
with every check that can fail before training - the shards' sequence length and masking, their
vocabulary (:func:`shards_vocabulary`: the copy the shards carry, or ``--vocab``, checked against
the manifest's hash), the model's shape against ``--config`` and the vocabulary. Problems raise
:class:`TrainingError`, one line naming the flag or file.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

import fsspec
import torch
import torch.distributed as dist

from pretrain import checkpoint as ckpt
from pretrain import hf
from pretrain.config import TrainConfig
from pretrain.data import ExampleShards
from pretrain.model import BertConfig, BertForPreTraining, parameter_counts, training_state_bytes
from pretrain.runtime import exists
from schemas import MANIFEST_FILE, VocabFile, manifest_vocabulary
from schemas.commands import InputError
from schemas.manifest import bytes_match, path_leaves_folder
from wordpiece.tokenizer import WordPieceTokenizer, parse_vocab_txt, read_vocab_file

log = logging.getLogger("pretrain")


class TrainingError(ValueError):
    """A problem found before the first step (bad shards, vocabulary, checkpoint or settings)."""


# -- processes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Processes:
    """This process's place in the torchrun group and the device it trains on."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_processes() -> Processes:
    """Join the torchrun group when there is one (nccl on GPU, gloo on CPU)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Processes(rank, world_size, local_rank, device)


def barrier(procs: Processes) -> None:
    """Wait for every rank (nothing to wait for in a single process)."""
    if procs.world_size > 1:
        dist.barrier()


def all_sum(procs: Processes, values: list[float]) -> list[float]:
    """``values`` summed over every rank (float64, on the run's device)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=procs.device)
    if procs.world_size > 1:
        dist.all_reduce(tensor)
    return tensor.tolist()


# -- set-up -----------------------------------------------------------------------------------------


@dataclass
class Setup:
    """What :func:`prepare` builds: the model, its vocabulary and, on resume, the saved state."""

    model: BertForPreTraining
    vocab: WordPieceTokenizer
    max_seq_length: int
    trainer_state: dict | None
    resumed_from: ckpt.Checkpoint | None


def _shard_params(reader: ExampleShards) -> tuple[int, bool]:
    params = reader.params
    pairs = params.get("pairs") or {}
    max_len = int(pairs.get("max_seq_length") or params.get("max_seq_length") or 0)
    return max_len, params.get("masking", True) is not False


def prepare(cfg: TrainConfig, probe: ExampleShards, device: torch.device | None = None) -> Setup:
    """Model, vocabulary and resume state, with every check that can fail before training; a new
    model is sized against ``device``'s memory (:func:`check_fits`) before it is allocated."""
    max_len, vocab_url, vocab = _check_shards(cfg, probe)
    trainer_state, resumed_from = None, None
    if cfg.resume:
        model, trainer_state, resumed_from = _resumed_model(cfg, vocab, vocab_url)
    elif cfg.init_from:
        source = cfg.init_from
        with contextlib.suppress(ckpt.CheckpointError):
            source = ckpt.resolve(cfg.init_from).url  # a run folder: its newest checkpoint
        check_init_vocab(cfg.init_from, source, vocab, vocab_url)
        try:
            model = BertForPreTraining.from_pretrained(source, seed=cfg.seed, **_objective_fields(cfg))
        except (OSError, ValueError) as err:
            raise TrainingError(f"--init-from {cfg.init_from}: {err}") from None
    else:
        overrides = _objective_fields(cfg)
        if cfg.dropout is not None:
            overrides |= {"hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.dropout}
        config = BertConfig.preset(cfg.config or "base", vocab.vocab_size, **overrides)
        check_fits(config, cfg.config or "base", device or torch.device("cpu"))
        model = BertForPreTraining(config, seed=cfg.seed)

    if model.config.vocab_size != vocab.vocab_size:
        raise TrainingError(
            f"the model has a vocabulary of {model.config.vocab_size} tokens but {vocab_url} has "
            f"{vocab.vocab_size}: token ids would fall outside the model's embeddings"
        )
    if max_len > model.config.max_position_embeddings:
        raise TrainingError(
            f"the shards hold sequences of up to {max_len} tokens; the model has "
            f"{model.config.max_position_embeddings} positions"
        )
    return Setup(model, vocab, max_len, trainer_state, resumed_from)


def device_memory_bytes(device: torch.device) -> int:
    """All the memory of ``device``: the GPU's total, or the host's physical memory for the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(config: BertConfig, size: str, device: torch.device, memory: int | None = None) -> None:
    """Refuse, before a byte is allocated, a new model whose weights, gradients and optimizer state
    alone (:func:`pretrain.model.training_state_bytes`) exceed all of ``device``'s memory
    (``memory`` overrides it, for tests): ``--config 1000/4096/32`` is one line, not minutes of
    allocation ending in an out-of-memory kill."""
    memory = device_memory_bytes(device) if memory is None else memory
    needed = training_state_bytes(config)
    if needed > memory:
        params = parameter_counts(config)["total"]
        raise TrainingError(
            f"--config {size}: {params / 1e6:,.0f}M parameters, whose weights, gradients and AdamW "
            f"state alone take {needed / 2**30:,.1f} GiB, more than all {memory / 2**30:,.1f} GiB of "
            f"this {device.type.upper()}'s memory; choose a smaller --config"
        )


def check_init_vocab(flag_value: str, source: str, vocab: WordPieceTokenizer, vocab_url: str) -> None:
    """Refuse an ``--init-from`` folder (``source``, resolved from ``flag_value``) whose
    ``vocab.txt`` has another number of tokens than its word embeddings have rows, or is not the
    shards' vocabulary (``vocab``, read from ``vocab_url``): another size, or the same size with
    other tokens (ids that mean other tokens). Each message gives both numbers (or the first
    differing id). A folder without ``vocab.txt`` is left to the embeddings-against-vocabulary
    check after loading."""
    try:
        hf.check_vocab_rows(source)
    except ValueError as err:
        raise TrainingError(f"--init-from {flag_value}: {err}") from None
    vocab_file = f"{source.rstrip('/')}/{hf.VOCAB_FILE}"
    if not exists(vocab_file):
        return
    try:
        tokens = read_vocab_file(vocab_file)
    except InputError as err:
        raise TrainingError(f"--init-from {flag_value}: {err}") from None
    remedy = "make the shards with the model's vocab.txt (pipelines examples --vocab), or start without --init-from"
    if len(tokens) != vocab.vocab_size:
        raise TrainingError(
            f"--init-from {flag_value}: {vocab_file} has {len(tokens)} tokens but the shards' vocabulary "
            f"{vocab_url} has {vocab.vocab_size}: {remedy}"
        )
    if tokens != vocab.vocab:
        first = next(i for i, (a, b) in enumerate(zip(tokens, vocab.vocab, strict=True)) if a != b)
        raise TrainingError(
            f"--init-from {flag_value}: {vocab_file} and the shards' vocabulary {vocab_url} both have "
            f"{len(tokens)} tokens but differ from id {first} on ({tokens[first]!r} against "
            f"{vocab.vocab[first]!r}): {remedy}"
        )


def _check_shards(cfg: TrainConfig, probe: ExampleShards) -> tuple[int, str, WordPieceTokenizer]:
    """The shards' sequence length, and the vocabulary they were made with (checked by hash)."""
    max_len, masked = _shard_params(probe)
    if not max_len:
        raise TrainingError(f"{cfg.shards}/manifest.json: no max_seq_length in the generation parameters")
    if cfg.max_seq_length is not None and cfg.max_seq_length != max_len:
        raise TrainingError(
            f"--max-seq-length {cfg.max_seq_length} but the shards at {cfg.shards} were made with {max_len}"
        )
    if not masked and not cfg.dynamic_masking:
        raise TrainingError(f"{cfg.shards}: the shards are unmasked (--no-masking); add --dynamic-masking")
    if probe.params.get("format") == "packed" and cfg.uses_nsp:
        raise TrainingError(
            f"{cfg.shards}: packed shards (--format packed) have no next-sentence pairs; add --no-nsp "
            "(or --objective ltr)"
        )
    vocab_url, vocab = shards_vocabulary(cfg.shards, probe, cfg.vocab)
    warn_unknown_share(cfg.shards, vocab.cased)
    return max_len, vocab_url, vocab


def shards_vocabulary(
    shards: str, probe: ExampleShards, override: str | None = None
) -> tuple[str, WordPieceTokenizer]:
    """The vocabulary the shards at ``shards`` (read by ``probe``) were made with, and where it was
    read: ``override`` (``--vocab``) when given, else the copy the folder carries (``vocab.txt``,
    checked against its size and SHA-256 in the manifest before use); outputs written before
    shards carried their vocabulary need ``override``. Either way its tokens must hash to the
    manifest's ``params.vocab_sha256``; the casing is the manifest's."""
    folder = shards.rstrip("/")
    try:
        recorded = manifest_vocabulary(probe.manifest, f"{folder}/{MANIFEST_FILE}")
    except InputError as err:
        raise TrainingError(str(err)) from None
    if recorded.cased is None:
        raise TrainingError(
            f"{folder}/{MANIFEST_FILE}: no params.cased (whether the text was tokenised cased); "
            "the manifest is damaged: write the shards again (pipelines examples)"
        )
    if override:
        url, vocab = override, _load_vocab(override, recorded.cased)
    elif recorded.copy is not None:
        url = f"{folder}/{recorded.copy.path}"
        if path_leaves_folder(folder, recorded.copy.path):
            raise TrainingError(f"{url}: a link to a file outside the shards folder: copy the file itself")
        vocab = _carried_vocab(url, recorded.copy, recorded.cased)
    else:  # never a path the manifest names: a file from a bucket does not choose what this reads
        made_with = f" (params.vocab records {recorded.source!r})" if recorded.source else ""
        raise TrainingError(
            f"{folder} carries no copy of its vocabulary (written before shards did): pass --vocab with "
            f"the vocabulary they were made with{made_with}"
        )
    if vocab.vocab_sha256 != recorded.sha256:
        named = f" ({folder}/{recorded.copy.path})" if recorded.copy and override else ""
        raise TrainingError(
            f"{'--vocab ' if override else ''}{url} is not the vocabulary the shards at {folder} were made "
            f"with{named}: SHA-256 {vocab.vocab_sha256[:12]}… against {recorded.sha256[:12]}… in "
            f"{folder}/{MANIFEST_FILE}"
        )
    return url, vocab


def _load_vocab(url: str, cased: bool) -> WordPieceTokenizer:
    """The vocabulary ``--vocab`` names."""
    try:
        return WordPieceTokenizer.load(url, cased=cased)
    except (InputError, OSError) as err:
        raise TrainingError(f"--vocab: {err}") from None


def _carried_vocab(url: str, copy: VocabFile, cased: bool) -> WordPieceTokenizer:
    """The vocabulary copy of a shards folder (at ``url``, as the manifest's ``copy`` names it),
    used only once its bytes match the size and SHA-256 recorded there (never more is read)."""
    try:
        with fsspec.open(url, "rb") as f:
            data = f.read(copy.num_bytes + 1)
    except FileNotFoundError:
        raise TrainingError(
            f"{url}: missing, but the manifest names it as the shards' vocabulary: copy the whole shards "
            "folder, or pass --vocab with the vocabulary they were made with"
        ) from None
    except OSError as err:
        raise TrainingError(f"{url}: cannot read the shards' vocabulary ({err})") from None
    if not bytes_match(data, copy):
        raise TrainingError(
            f"{url}: differs from the size and SHA-256 the manifest records for it (modified or damaged): "
            "copy the shards folder again, or pass --vocab with the vocabulary they were made with"
        )
    try:
        return WordPieceTokenizer(parse_vocab_txt(data, url), cased, source=url)
    except InputError as err:
        raise TrainingError(str(err)) from None


UNK_WARN_SHARE = 0.01
"""Above this share of ``[UNK]`` tokens in the shards (their ``stats.json`` ``unk_rate``, measured
over every token by ``pipelines examples``), ``pretrain`` warns that casing and vocabulary differ."""


def warn_unknown_share(shards: str, cased: bool) -> float | None:
    """Warn, with the figure, when the shards' ``stats.json`` records more than
    :data:`UNK_WARN_SHARE` ``[UNK]`` tokens (``--cased`` examples over an uncased vocabulary give
    about 7%); return the recorded share (None when ``stats.json`` or the figure is absent)."""
    import json

    try:
        with fsspec.open(f"{shards.rstrip('/')}/stats.json", "r", encoding="utf-8") as f:
            share = json.load(f).get("unk_rate")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(share, (int, float)):
        return None
    if share > UNK_WARN_SHARE:
        log.warning(
            "%s: %.1f%% of the tokens are [UNK] (stats.json unk_rate) in these %s shards: the casing "
            "does not fit the vocabulary? (pipelines examples --cased/--uncased)",
            shards,
            100 * share,
            "cased" if cased else "uncased",
        )
    return float(share)


def _resumed_model(
    cfg: TrainConfig, vocab: WordPieceTokenizer, vocab_url: str
) -> tuple[BertForPreTraining, dict, ckpt.Checkpoint]:
    """The model and trainer state of the checkpoint ``--resume`` continues, checked against the
    objective, the shards' vocabulary (by the hash the checkpoint records) and (when given)
    ``--config``."""
    try:
        resumed_from = ckpt.resolve(cfg.resume)
    except ckpt.CheckpointError as err:
        raise TrainingError(str(err)) from None
    try:
        model = BertForPreTraining.from_pretrained(resumed_from.url)
        trainer_state = ckpt.load_state(f"{resumed_from.url}/{ckpt.TRAINER_STATE}")
    except (OSError, ValueError) as err:  # a config or state that does not fit its weights, say
        raise TrainingError(f"--resume {cfg.resume}: {err}") from None
    if (model.config.nsp, model.config.causal) != (cfg.uses_nsp, cfg.objective == "ltr"):
        raise TrainingError(
            f"{resumed_from.url} was trained with nsp={model.config.nsp}, causal="
            f"{model.config.causal}; --resume must keep --objective and --no-nsp as they were"
        )
    trained_on = trainer_state.get("vocab_sha256") if isinstance(trainer_state, dict) else None
    if trained_on != vocab.vocab_sha256:
        recorded = f"SHA-256 {trained_on[:12]}…" if isinstance(trained_on, str) else "no vocabulary hash"
        raise TrainingError(
            f"{resumed_from.url} was trained with another vocabulary than the shards' {vocab_url} "
            f"({recorded} in its {ckpt.TRAINER_STATE}.json, {vocab.vocab_sha256[:12]}… for the shards): "
            "--resume needs shards made with the run's vocabulary"
        )
    if cfg.config is not None:
        wanted = BertConfig.preset(cfg.config, vocab.vocab_size)
        got = model.config
        shape = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        if any(getattr(wanted, k) != getattr(got, k) for k in shape):
            raise TrainingError(
                f"{resumed_from.url} holds a {got.num_hidden_layers}-layer, {got.hidden_size}-wide model, "
                f"not --config {cfg.config}; leave --config out when resuming"
            )
    return model, trainer_state, resumed_from


def _objective_fields(cfg: TrainConfig) -> dict:
    """The model-config fields the objective sets: the NSP head, causal attention."""
    return {"nsp": cfg.uses_nsp, "causal": cfg.objective == "ltr"}


def check_output(output: str) -> None:
    """Fail early, with one line, when ``--output`` cannot be written (a probe file, removed, and
    any folder made for it: a run that fails before it writes leaves no empty output behind)."""
    from pretrain.outputs import OutputError, check_writable

    try:
        check_writable(output, f"--output {output} is not writable")
    except OutputError as err:
        raise TrainingError(str(err)) from None
