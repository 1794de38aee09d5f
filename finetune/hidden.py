"""Hidden states out of a frozen encoder (:func:`hidden_states`, as transformers'
``output_hidden_states``) and the layer choices of the paper's Table 7."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pretrain.model import BertModel

FEATURE_CHOICES = ("embeddings", "second-to-last", "last", "sum-last-4", "concat-last-4", "sum-all")
COMBINE = dict(zip(FEATURE_CHOICES, ["single"] * 3 + ["sum", "concat", "sum"], strict=True))


def feature_layers(choice: str, num_layers: int) -> tuple[int, ...]:
    """The indices into :func:`hidden_states` (0: the embeddings) that feed Table 7's row ``choice``
    (``sum-all``: layers 1..L, the paper's "all 12 layers"); ``ValueError`` for an unknown choice or
    an encoder too shallow for it."""
    if choice not in FEATURE_CHOICES:
        raise ValueError(f"--features must be one of {', '.join(FEATURE_CHOICES)}, got {choice!r}")
    if choice.endswith("last-4") and num_layers < 4:
        raise ValueError(
            f"--features {choice} needs an encoder of at least 4 layers; this one has {num_layers}"
        )
    if choice == "second-to-last" and num_layers < 2:
        raise ValueError("--features second-to-last needs an encoder of at least 2 layers")
    return {
        "embeddings": (0,),
        "second-to-last": (num_layers - 1,),
        "last": (num_layers,),
        "sum-last-4": tuple(range(num_layers - 3, num_layers + 1)),
        "concat-last-4": tuple(range(num_layers - 3, num_layers + 1)),
        "sum-all": tuple(range(1, num_layers + 1)),
    }[choice]


def parse_layers(text: str, num_layers: int) -> tuple[int, ...]:
    """``finetune features --layers`` (comma-separated indices into :func:`hidden_states`, negative
    from the end: -1 the last layer, 0 the embeddings) as absolute indices in the order given;
    ``ValueError`` naming the flag for an index out of range, a repeat, or text that is not ints."""
    try:
        given = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(
            f"--layers {text!r}: expected comma-separated integers such as -1,-2,-3,-4"
        ) from None
    if not given:
        raise ValueError("--layers: name at least one layer (-1 is the last)")
    total = num_layers + 1
    bad = [i for i in given if not -total <= i < total]
    if bad:
        raise ValueError(
            f"--layers {text}: {bad} out of range; this encoder has {num_layers} layers "
            f"(0 = embeddings .. {num_layers}, or -1 .. -{total})"
        )
    absolute = tuple(i % total for i in given)
    if len(set(absolute)) != len(absolute):
        raise ValueError(f"--layers {text}: a layer is named twice")
    return absolute


def hidden_states(
    model: BertModel,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """The embeddings' output and each layer's for one batch, ``num_hidden_layers + 1`` tensors
    ``[batch, length, hidden]``; ``model`` runs as it is (mode and grad: the caller's)."""
    captured: list[torch.Tensor] = []

    def keep(_module: torch.nn.Module, _inputs: object, output: torch.Tensor) -> None:
        captured.append(output)

    hooks = [model.embeddings.register_forward_hook(keep)]
    hooks += [layer.register_forward_hook(keep) for layer in model.encoder.layer]
    try:
        model(input_ids, token_type_ids, attention_mask)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(captured) == model.config.num_hidden_layers + 1
    return captured


def stack_layers(states: Sequence[torch.Tensor], layers: Sequence[int]) -> torch.Tensor:
    """The chosen hidden states stacked on a new third axis: ``[batch, length, len(layers), hidden]``."""
    return torch.stack([states[i] for i in layers], dim=2)
