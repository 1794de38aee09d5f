"""pretrain/feed.py on the CPU: the host facts of each micro batch, and the pass-through copy."""

from __future__ import annotations

import torch

from pretrain.batching import pack
from pretrain.feed import DeviceFeed


def _batch() -> dict[str, torch.Tensor]:
    """Two examples padded to width 8 (lengths 7 and 5), three prediction slots (one padding)."""
    lengths = torch.tensor([7, 5])
    mask = (torch.arange(8)[None, :] < lengths[:, None]).long()
    return {
        "input_ids": torch.arange(16).view(2, 8) * mask,
        "attention_mask": mask,
        "token_type_ids": torch.zeros(2, 8, dtype=torch.long),
        "masked_lm_positions": torch.tensor([[1, 2], [3, 0]]),
        "masked_lm_ids": torch.tensor([[5, 6], [7, 0]]),
        "masked_lm_weights": torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        "next_sentence_labels": torch.tensor([0, 1]),
    }


def test_the_step_reads_what_it_counts_from_the_host_batch_in_any_layout():
    padded, packed = _batch(), pack(_batch())
    closed = []

    def source():
        try:
            yield padded, (0, 1)
            yield packed, (0, 2)
        finally:
            closed.append(True)

    feed = DeviceFeed(source(), torch.device("cpu"))
    first, second = next(feed), next(feed)
    assert (first.num_tokens, first.shape, first.num_masked, first.num_pairs) == (12, (2, 8), 3.0, 2)
    assert (second.num_tokens, second.shape, second.num_masked, second.num_pairs) == (12, (2, 7), 3.0, 2)
    assert (first.position, second.position) == ((0, 1), (0, 2))
    # on the CPU the feed passes the host tensors through, as the model and the loss take them
    assert (
        first.inputs["input_ids"] is padded["input_ids"]
        and first.inputs["attention_mask"] is padded["attention_mask"]
    )
    # packed batches bound their segments by the batch width (a static shape), not the longest example
    assert second.inputs["cu_seqlens"] is packed["cu_seqlens"] and second.inputs["max_seqlen"] == 8
    assert set(first.targets) == {"masked_lm_ids", "masked_lm_weights", "next_sentence_labels"}
    assert len(first.device_tensors()) == 7  # ids, mask, types, positions + the three targets
    feed.close()
    assert closed == [True]


def test_a_batch_without_padding_runs_attention_without_a_mask():
    batch = _batch()
    batch["attention_mask"] = torch.ones_like(batch["attention_mask"])
    micro = next(DeviceFeed(iter([(batch, None)]), torch.device("cpu")))
    assert micro.inputs["attention_mask"] is None and micro.num_tokens == 16
