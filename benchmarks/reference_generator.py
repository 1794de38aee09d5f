"""The reference generator's instance creation, re-implemented in plain Python for the benchmark.

google-research/bert's ``create_pretraining_data.py`` needs TensorFlow, which cannot run here.
This module re-implements, for timing only, the part of it that runs after tokenisation: the
pairing of ``create_instances_from_document``, the masking of
``create_masked_lm_predictions``, ``truncate_seq_pair``, the corpus-level loop of
``create_training_instances`` and the id conversion and padding that
``write_instance_to_example_files`` does before it builds ``tf.train.Example`` protos. Same
algorithm, same ``random.Random`` calls, same list copies and string tokens; the TFRecord
serialisation is left out. Never imported by the pipelines.
"""

from __future__ import annotations

import random
from collections import namedtuple

MaskedLmInstance = namedtuple("MaskedLmInstance", ["index", "label"])


class TrainingInstance:
    """One pair with its masked tokens, as the reference keeps it until writing."""

    def __init__(self, tokens, segment_ids, masked_lm_positions, masked_lm_labels, is_random_next):
        self.tokens = tokens
        self.segment_ids = segment_ids
        self.is_random_next = is_random_next
        self.masked_lm_positions = masked_lm_positions
        self.masked_lm_labels = masked_lm_labels


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int, rng: random.Random) -> None:
    """Trim the longer list one token at a time, from the front or the back by a coin."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(longer) >= 1
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def create_masked_lm_predictions(
    tokens: list[str],
    masked_lm_prob: float,
    max_predictions_per_seq: int,
    vocab_words: list[str],
    rng: random.Random,
    whole_word_mask: bool = False,
):
    """Shuffle every candidate, take them in order until enough, replace 80/10/10."""
    candidates: list[list[int]] = []
    for index, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]"):
            continue
        if whole_word_mask and candidates and token.startswith("##"):
            candidates[-1].append(index)
        else:
            candidates.append([index])
    rng.shuffle(candidates)
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    masked: list[MaskedLmInstance] = []
    covered: set[int] = set()
    for group in candidates:
        if len(masked) >= num_to_predict:
            break
        if len(masked) + len(group) > num_to_predict:
            continue
        if any(index in covered for index in group):
            continue
        for index in group:
            covered.add(index)
            if rng.random() < 0.8:
                replacement = "[MASK]"
            elif rng.random() < 0.5:
                replacement = tokens[index]
            else:
                replacement = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            output_tokens[index] = replacement
            masked.append(MaskedLmInstance(index=index, label=tokens[index]))
    masked = sorted(masked, key=lambda m: m.index)
    return output_tokens, [m.index for m in masked], [m.label for m in masked]


def create_instances_from_document(
    all_documents: list[list[list[str]]],
    document_index: int,
    max_seq_length: int,
    short_seq_prob: float,
    masked_lm_prob: float,
    max_predictions_per_seq: int,
    vocab_words: list[str],
    rng: random.Random,
) -> list[TrainingInstance]:
    """Chunk a document into A/B pairs (B random with probability 0.5, unused sentences put back)."""
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    chunk: list[list[str]] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            if chunk:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                tokens_a: list[str] = []
                for j in range(a_end):
                    tokens_a.extend(chunk[j])
                tokens_b: list[str] = []
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_index = rng.randint(0, len(all_documents) - 1)
                        if random_index != document_index:
                            break
                    random_document = all_documents[random_index]
                    for j in range(rng.randint(0, len(random_document) - 1), len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    i -= len(chunk) - a_end
                else:
                    is_random_next = False
                    for j in range(a_end, len(chunk)):
                        tokens_b.extend(chunk[j])
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert len(tokens_a) >= 1 and len(tokens_b) >= 1
                tokens = ["[CLS]"]
                segment_ids = [0]
                for token in tokens_a:
                    tokens.append(token)
                    segment_ids.append(0)
                tokens.append("[SEP]")
                segment_ids.append(0)
                for token in tokens_b:
                    tokens.append(token)
                    segment_ids.append(1)
                tokens.append("[SEP]")
                segment_ids.append(1)
                tokens, positions, labels = create_masked_lm_predictions(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng
                )
                instances.append(TrainingInstance(tokens, segment_ids, positions, labels, is_random_next))
            chunk = []
            chunk_length = 0
        i += 1
    return instances


def create_training_instances(
    all_documents: list[list[list[str]]],
    vocab_words: list[str],
    rng: random.Random,
    *,
    dupe_factor: int = 5,
    max_seq_length: int = 128,
    short_seq_prob: float = 0.1,
    masked_lm_prob: float = 0.15,
    max_predictions_per_seq: int = 20,
) -> list[TrainingInstance]:
    """Every document ``dupe_factor`` times, after shuffling the documents; instances shuffled."""
    all_documents = [d for d in all_documents if d]
    rng.shuffle(all_documents)
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(
                create_instances_from_document(
                    all_documents,
                    document_index,
                    max_seq_length,
                    short_seq_prob,
                    masked_lm_prob,
                    max_predictions_per_seq,
                    vocab_words,
                    rng,
                )
            )
    rng.shuffle(instances)
    return instances


def instance_features(
    instance: TrainingInstance, vocab: dict[str, int], max_seq_length: int, max_predictions_per_seq: int
) -> dict[str, list]:
    """The padded feature lists the reference puts into a ``tf.train.Example`` (not serialised)."""
    input_ids = [vocab[token] for token in instance.tokens]
    input_mask = [1] * len(input_ids)
    segment_ids = list(instance.segment_ids)
    assert len(input_ids) <= max_seq_length
    while len(input_ids) < max_seq_length:
        input_ids.append(0)
        input_mask.append(0)
        segment_ids.append(0)
    masked_lm_positions = list(instance.masked_lm_positions)
    masked_lm_ids = [vocab[token] for token in instance.masked_lm_labels]
    masked_lm_weights = [1.0] * len(masked_lm_ids)
    while len(masked_lm_positions) < max_predictions_per_seq:
        masked_lm_positions.append(0)
        masked_lm_ids.append(0)
        masked_lm_weights.append(0.0)
    return {
        "input_ids": input_ids,
        "input_mask": input_mask,
        "segment_ids": segment_ids,
        "masked_lm_positions": masked_lm_positions,
        "masked_lm_ids": masked_lm_ids,
        "masked_lm_weights": masked_lm_weights,
        "next_sentence_labels": [1 if instance.is_random_next else 0],
    }
