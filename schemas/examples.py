"""The ``examples`` format: BERT pre-training examples, already masked and paired for NSP.

Written by ``pipelines examples``; read by the ``pretrain`` reader, ``pyarrow.dataset`` or HF
``datasets``. Column names follow the reference generator's features where they exist.

| column               | type                 | meaning                                                        |
|----------------------|----------------------|----------------------------------------------------------------|
| input_ids            | list<ID>             | ``[CLS] A [SEP] B [SEP]`` after masking, unpadded               |
| masked_lm_positions  | list<int16>          | positions that were selected for prediction, ascending          |
| masked_lm_ids        | list<ID>             | the original ids at those positions                             |
| next_sentence_labels | int8                 | 1 = B is a random span from another document, 0 = actual next   |
|                      |                      | (packed examples: always 0, there is no B)                      |
| num_tokens_a         | int16                | tokens of ``[CLS] A [SEP]``: token type 0 before it, 1 from it  |
|                      |                      | (packed examples: = num_tokens, one segment)                    |
| num_tokens           | int16                | ``len(input_ids)``, for length bucketing                        |
| doc_id               | string               | the document A (and, for label 0, B) came from                  |
| dupe_index           | int16                | which of the ``dupe_factor`` passes over the document           |

Packed examples (``pipelines examples --format packed``, manifest parameter ``format``) are
``[CLS] s1 s2 ... [SEP] t1 t2 ... [SEP]``: full sentences of one or more documents, a ``[SEP]``
between documents, no pairs.

``ID`` is the narrowest unsigned integer type that holds every id of the vocabulary: uint16
up to 65,536 tokens, uint32 beyond. ``examples_format(vocab_size)`` gives the format.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from schemas.formats import RecordFormat

EXAMPLES_VERSION = 1


def id_type(vocab_size: int) -> pa.DataType:
    """The narrowest unsigned integer type for token ids of a vocabulary."""
    if vocab_size < 1:
        raise ValueError(f"a vocabulary has at least one token, got {vocab_size}")
    return pa.uint16() if vocab_size <= 1 << 16 else pa.uint32()


def _check_rows(table: pa.Table) -> list[str]:
    if not len(table):
        return []
    problems = []
    lengths = pc.list_value_length(table.column("input_ids"))
    if not pc.all(pc.equal(lengths, table.column("num_tokens").cast(lengths.type))).as_py():
        problems.append("num_tokens differs from the length of input_ids")
    # Packed examples (one segment) have num_tokens_a == num_tokens.
    if not pc.all(pc.less_equal(table.column("num_tokens_a"), table.column("num_tokens"))).as_py():
        problems.append("num_tokens_a must not exceed num_tokens")
    positions = pc.list_value_length(table.column("masked_lm_positions"))
    if not pc.all(pc.equal(positions, pc.list_value_length(table.column("masked_lm_ids")))).as_py():
        problems.append("masked_lm_positions and masked_lm_ids differ in length")
    if not pc.all(pc.is_in(table.column("next_sentence_labels"), pa.array([0, 1], pa.int8()))).as_py():
        problems.append("next_sentence_labels must be 0 or 1")
    return problems


def examples_format(vocab_size: int) -> RecordFormat:
    """The examples format for a vocabulary of ``vocab_size`` tokens."""
    ids = id_type(vocab_size)
    return RecordFormat(
        name="examples",
        version=EXAMPLES_VERSION,
        fields=(
            pa.field("input_ids", pa.list_(pa.field("item", ids, nullable=False)), nullable=False),
            pa.field(
                "masked_lm_positions", pa.list_(pa.field("item", pa.int16(), nullable=False)), nullable=False
            ),
            pa.field("masked_lm_ids", pa.list_(pa.field("item", ids, nullable=False)), nullable=False),
            pa.field("next_sentence_labels", pa.int8(), nullable=False),
            pa.field("num_tokens_a", pa.int16(), nullable=False),
            pa.field("num_tokens", pa.int16(), nullable=False),
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("dupe_index", pa.int16(), nullable=False),
        ),
        row_checks=(_check_rows,),
    )
