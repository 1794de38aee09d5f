"""What a pre-training run checks and builds before its first step: the torchrun process group
(:class:`Processes`), and :func:`prepare`: the model (new, ``--init-from``, or ``--resume``'s), the
vocabulary (the shards' copy or ``--vocab``, checked against the manifest's hash) and the saved
trainer state, every check that can fail before training one :class:`~schemas.commands.InputError`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from dataclasses import dataclass

import torch
import torch.distributed as dist

from pretrain import checkpoint as ckpt
from pretrain import hf
from pretrain.config import PretrainConfig
from pretrain.data import ExampleShards
from pretrain.model import BertConfig, BertForPreTraining, parameter_counts, training_state_bytes
from schemas import MANIFEST_FILE, manifest_vocabulary, storage
from schemas.commands import InputError, OutputError
from schemas.inputs import loads
from schemas.manifest import bytes_match, path_leaves_folder
from wordpiece.tokenizer import WordPieceTokenizer, parse_vocab_txt, read_vocab_file, unknown_share_warning

log = logging.getLogger("pretrain")


@contextlib.contextmanager
def input_errors(prefix: str = ""):
    """A ``ValueError`` raised by a reader of inputs as one :class:`InputError`, after ``prefix``."""
    try:
        yield
    except ValueError as err:
        raise InputError(f"{prefix}{err}") from None


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
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
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


@dataclass
class Setup:
    """What :func:`prepare` builds: the model, its vocabulary and, on resume, the saved state."""

    model: BertForPreTraining
    vocab: WordPieceTokenizer
    max_seq_length: int
    trainer_state: dict | None
    resumed_from: ckpt.Checkpoint | None


def prepare(cfg: PretrainConfig, probe: ExampleShards, device: torch.device | None = None) -> Setup:
    """Model, vocabulary and resume state, with every check that can fail before training."""
    max_len, vocab_url, vocab = _check_shards(cfg, probe)
    trainer_state, resumed_from = None, None
    objective = {"nsp": cfg.uses_nsp, "causal": cfg.objective == "ltr"}
    if cfg.resume:
        model, trainer_state, resumed_from = _resumed_model(cfg, vocab, vocab_url)
    elif cfg.init_from:
        source = ckpt.weights_folder(cfg.init_from)  # a run folder: its newest checkpoint
        check_init_vocab(cfg.init_from, source, vocab, vocab_url)
        with input_errors(f"--init-from {cfg.init_from}: "):
            model = BertForPreTraining.from_pretrained(source, seed=cfg.seed, **objective)
    else:
        if cfg.dropout is not None:
            objective |= {"hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.dropout}
        config = BertConfig.preset(cfg.config or "base", vocab.vocab_size, **objective)
        check_fits(config, cfg.config or "base", device or torch.device("cpu"))
        model = BertForPreTraining(config, seed=cfg.seed)
    if model.config.vocab_size != vocab.vocab_size:
        raise InputError(
            f"the model has a vocabulary of {model.config.vocab_size} tokens but {vocab_url} has "
            f"{vocab.vocab_size}: token ids would fall outside the model's embeddings"
        )
    if max_len > model.config.max_position_embeddings:
        raise InputError(
            f"the shards hold sequences of up to {max_len} tokens; the model has "
            f"{model.config.max_position_embeddings} positions"
        )
    return Setup(model, vocab, max_len, trainer_state, resumed_from)


def check_fits(config: BertConfig, size: str, device: torch.device, memory: int | None = None) -> None:
    """Refuse, before a byte is allocated, a model whose training state alone exceeds ``device``'s memory."""
    if memory is None:  # all of the GPU's, or the host's physical memory for the CPU
        cuda = device.type == "cuda"
        memory = (
            torch.cuda.get_device_properties(device).total_memory
            if cuda
            else os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        )
    needed = training_state_bytes(config)
    if needed > memory:
        params = parameter_counts(config)["total"]
        raise InputError(
            f"--config {size}: {params / 1e6:,.0f}M parameters, whose weights, gradients and AdamW "
            f"state alone take {needed / 2**30:,.1f} GiB, more than all {memory / 2**30:,.1f} GiB of "
            f"this {device.type.upper()}'s memory; choose a smaller --config"
        )


def check_init_vocab(flag_value: str, source: str, vocab: WordPieceTokenizer, vocab_url: str) -> None:
    """Refuse an ``--init-from`` folder whose ``vocab.txt`` does not fit its embeddings or the shards."""
    prefix = f"--init-from {flag_value}: "
    with input_errors(prefix):
        hf.check_vocab_rows(source)
        vocab_file = f"{source.rstrip('/')}/{hf.VOCAB_FILE}"
        if not storage.exists(vocab_file):
            return  # the embeddings are checked against the vocabulary after loading
        tokens = read_vocab_file(vocab_file)
    remedy = "make the shards with the model's vocab.txt (pipelines examples --vocab), or start without --init-from"
    if len(tokens) != vocab.vocab_size:
        raise InputError(
            f"{prefix}{vocab_file} has {len(tokens)} tokens but the shards' vocabulary "
            f"{vocab_url} has {vocab.vocab_size}: {remedy}"
        )
    if tokens != vocab.vocab:
        first = next(i for i, (a, b) in enumerate(zip(tokens, vocab.vocab, strict=True)) if a != b)
        raise InputError(
            f"{prefix}{vocab_file} and the shards' vocabulary {vocab_url} both have {len(tokens)} tokens "
            f"but differ from id {first} on ({tokens[first]!r} against {vocab.vocab[first]!r}): {remedy}"
        )


def _check_shards(cfg: PretrainConfig, probe: ExampleShards) -> tuple[int, str, WordPieceTokenizer]:
    """The shards' sequence length, and the vocabulary they were made with (checked by hash)."""
    max_len = probe.max_seq_length
    if not max_len:
        raise InputError(f"{cfg.shards}/{MANIFEST_FILE}: no max_seq_length in the generation parameters")
    if cfg.max_seq_length is not None and cfg.max_seq_length != max_len:
        raise InputError(
            f"--max-seq-length {cfg.max_seq_length} but the shards at {cfg.shards} were made with {max_len}"
        )
    if probe.params.get("masking", True) is False and not cfg.dynamic_masking:
        raise InputError(f"{cfg.shards}: the shards are unmasked (--no-masking); add --dynamic-masking")
    if probe.params.get("format") == "packed" and cfg.uses_nsp:
        raise InputError(
            f"{cfg.shards}: packed shards (--format packed) have no next-sentence pairs; add --no-nsp "
            "(or --objective ltr)"
        )
    vocab_url, vocab = shards_vocabulary(cfg.shards, probe, cfg.vocab)
    warn_unknown_share(cfg.shards, vocab.cased)
    return max_len, vocab_url, vocab


def shards_vocabulary(
    shards: str, probe: ExampleShards, override: str | None = None
) -> tuple[str, WordPieceTokenizer]:
    """Where the shards' vocabulary was read, and it: ``override`` (``--vocab``) or the copy the
    folder carries (once its size and SHA-256 match the manifest's); either way its tokens must
    hash to the manifest's ``params.vocab_sha256``. The casing is the manifest's."""
    folder = shards.rstrip("/")
    with input_errors():
        recorded = manifest_vocabulary(probe.manifest, f"{folder}/{MANIFEST_FILE}")
    if recorded.cased is None:
        raise InputError(
            f"{folder}/{MANIFEST_FILE}: no params.cased (whether the text was tokenised cased); "
            "the manifest is damaged: write the shards again (pipelines examples)"
        )
    if override:
        url = override
        with input_errors("--vocab: "):
            vocab = WordPieceTokenizer.load(override, cased=recorded.cased)
    elif recorded.copy is not None:
        url = f"{folder}/{recorded.copy.path}"
        if path_leaves_folder(folder, recorded.copy.path):
            raise InputError(f"{url}: a link to a file outside the shards folder: copy the file itself")
        vocab = _carried_vocab(url, recorded.copy, recorded.cased)
    else:  # never a path the manifest names: a file from a bucket does not choose what this reads
        made_with = f" (params.vocab records {recorded.source!r})" if recorded.source else ""
        raise InputError(
            f"{folder} carries no copy of its vocabulary: pass --vocab with the one they were made with{made_with}"
        )
    if vocab.vocab_sha256 != recorded.sha256:
        named = f" ({folder}/{recorded.copy.path})" if recorded.copy and override else ""
        raise InputError(
            f"{'--vocab ' if override else ''}{url} is not the vocabulary the shards at {folder} were made "
            f"with{named}: SHA-256 {vocab.vocab_sha256[:12]}… against {recorded.sha256[:12]}… in "
            f"{folder}/{MANIFEST_FILE}"
        )
    return url, vocab


def _carried_vocab(url: str, copy, cased: bool) -> WordPieceTokenizer:
    """A shards folder's vocabulary copy, once its bytes match the manifest's size and SHA-256."""
    try:
        with storage.open_binary(url) as f:
            data = f.read(copy.num_bytes + 1)
    except FileNotFoundError:
        raise InputError(
            f"{url}: missing, but the manifest names it as the shards' vocabulary: copy the whole shards "
            "folder, or pass --vocab with the vocabulary they were made with"
        ) from None
    if not bytes_match(data, copy):
        raise InputError(
            f"{url}: differs from the size and SHA-256 the manifest records for it (modified or damaged): "
            "copy the shards folder again, or pass --vocab with the vocabulary they were made with"
        )
    with input_errors():
        return WordPieceTokenizer(parse_vocab_txt(data, url), cased, source=url)


def warn_unknown_share(shards: str, cased: bool) -> float | None:
    """Warn when the shards' ``stats.json`` records over ``UNK_WARN_SHARE`` ``[UNK]``; the share."""
    where = f"{shards.rstrip('/')}/stats.json"
    try:
        share = loads(storage.read_bytes(where, 16 << 20), where).get("unk_rate")
    except (OSError, InputError, AttributeError):
        return None
    if type(share) not in (int, float):
        return None
    if warning := unknown_share_warning(share, cased):
        log.warning("%s: %s", shards, warning)
    return float(share)


def _resumed_model(
    cfg: PretrainConfig, vocab: WordPieceTokenizer, vocab_url: str
) -> tuple[BertForPreTraining, dict, ckpt.Checkpoint]:
    """``--resume``'s model and trainer state, checked against the objective, vocabulary and ``--config``."""
    found = ckpt.resolve(cfg.resume)
    with input_errors(f"--resume {cfg.resume}: "):
        model = BertForPreTraining.from_pretrained(found.url)
    state = ckpt.load_state(f"{found.url}/{ckpt.TRAINER_STATE}")
    if (model.config.nsp, model.config.causal) != (cfg.uses_nsp, cfg.objective == "ltr"):
        raise InputError(
            f"{found.url} was trained with nsp={model.config.nsp}, causal={model.config.causal}; "
            "--resume must keep --objective and --no-nsp as they were"
        )
    trained_on = state.get("vocab_sha256")
    if trained_on != vocab.vocab_sha256:
        recorded = f"SHA-256 {trained_on[:12]}…" if isinstance(trained_on, str) else "no vocabulary hash"
        raise InputError(
            f"{found.url} was trained with another vocabulary than the shards' {vocab_url} "
            f"({recorded} in its {ckpt.TRAINER_STATE}.json, {vocab.vocab_sha256[:12]}… for the shards): "
            "--resume needs shards made with the run's vocabulary"
        )
    if cfg.config is not None:
        wanted, got = BertConfig.preset(cfg.config, vocab.vocab_size), model.config
        shape = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        if any(getattr(wanted, k) != getattr(got, k) for k in shape):
            raise InputError(
                f"{found.url} holds a {got.num_hidden_layers}-layer, {got.hidden_size}-wide model, "
                f"not --config {cfg.config}; leave --config out when resuming"
            )
    return model, state, found


def check_output(out: storage.Folder) -> None:
    """Create and remove a probe file in ``--output`` (and the folders this made), or :class:`OutputError`."""
    fs, root = storage.filesystem(out.url)
    made = []  # the folders makedirs will create, deepest first
    folder = root
    while folder not in ("", "/") and not fs.exists(folder):
        made.append(folder)
        folder = folder.rsplit("/", 1)[0]
    probe = f".write-probe-{uuid.uuid4().hex}"
    try:
        fs.makedirs(root, exist_ok=True)
        out.write(probe, b"")  # journaled: a probe left by a killed run is the run's own
        fs.rm(f"{root}/{probe}")
    except Exception as err:  # Any filesystem error means the same thing to the user.
        raise OutputError(
            f"--output {out.url} is not writable: cannot write there ({type(err).__name__}: {err})"
        ) from None
    finally:
        for path in made:
            with contextlib.suppress(Exception):
                if fs.isdir(path) and not fs.ls(path):
                    fs.rmdir(path)
