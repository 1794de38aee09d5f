"""The numbers of Devlin et al. (2019), "BERT: Pre-training of Deep Bidirectional Transformers for
Language Understanding", that our reports stand beside: each table once, as the paper prints it
(percent; Table 6's perplexity as it is). ``finetune report`` reads Tables 1-4, ``chain ablate``'s
report Tables 5-8."""

from __future__ import annotations

from typing import Any

TABLE_1_COLUMNS = {
    **{"mnli": "MNLI-(m/mm)", "qqp": "QQP", "qnli": "QNLI", "sst2": "SST-2", "cola": "CoLA"},
    **{"stsb": "STS-B", "mrpc": "MRPC", "rte": "RTE", "average": "Average"},
}
"""Table 1's columns in order, by GLUE task (each in its paper metric); Average leaves out WNLI."""
TABLE_1: dict[str, dict[str, Any]] = {  # GLUE *test* sets, scored by the GLUE evaluation server
    "BERT-BASE": dict(
        zip(TABLE_1_COLUMNS, ((84.6, 83.4), 71.2, 90.5, 93.5, 52.1, 85.8, 88.9, 66.4, 79.6), strict=True)
    ),
    "BERT-LARGE": dict(
        zip(TABLE_1_COLUMNS, ((86.7, 85.9), 72.1, 92.7, 94.9, 60.5, 86.5, 89.3, 70.1, 82.1), strict=True)
    ),
}
SQUAD = {  # Table 2 (SQuAD v1.1) and Table 3 (SQuAD v2.0): single model, dev EM and F1
    "1.1": {"BERT-BASE": {"exact_match": 80.8, "f1": 88.5}, "BERT-LARGE": {"exact_match": 84.1, "f1": 90.9}},
    "2.0": {"BERT-LARGE": {"exact_match": 78.7, "f1": 81.9}},
}
SWAG = {"BERT-BASE": {"dev": 81.6}, "BERT-LARGE": {"dev": 86.6, "test": 86.3}}  # Table 4, accuracy
ABLATION_COLUMNS = {  # Tables 5-8, dev sets
    "5": ("MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD F1"),  # accuracy (MRPC too), SQuAD v1.1 F1
    "6": ("LM ppl", "MNLI-m", "MRPC", "SST-2"),  # by L/H/A; the LM's perplexity on held-out data
    "7": ("dev F1", "test F1"),  # CoNLL-2003 NER
    "8": ("MNLI", "NER fine-tune", "NER features"),  # by MASK / SAME / RND
}
ABLATIONS: dict[str, dict[str, tuple]] = {  # per table and row, its columns' values (None: not in the paper)
    "5": {
        "BERT_BASE": (84.4, 88.4, 86.7, 92.7, 88.5),
        "No NSP": (83.9, 84.9, 86.5, 92.6, 87.9),
        "LTR & No NSP": (82.1, 84.3, 77.5, 92.1, 77.8),
        "+ BiLSTM": (82.1, 84.1, 75.7, 91.6, 84.9),
    },
    "6": {
        "3/768/12": (5.84, 77.9, 79.8, 88.4),
        "6/768/3": (5.24, 80.6, 82.2, 90.7),
        "6/768/12": (4.68, 81.9, 84.8, 91.3),
        "12/768/12": (3.99, 84.4, 86.7, 92.9),
        "12/1024/16": (3.54, 85.7, 86.9, 93.3),
        "24/1024/16": (3.23, 86.6, 87.8, 93.7),
    },
    "7": {
        "Fine-tuning: BERT_LARGE": (96.6, 92.8),
        "Fine-tuning: BERT_BASE": (96.4, 92.4),
        "Feature-based: embeddings": (91.0, None),
        "Feature-based: second-to-last": (95.6, None),
        "Feature-based: last": (94.9, None),
        "Feature-based: sum-last-4": (95.9, None),
        "Feature-based: concat-last-4": (96.1, None),
        "Feature-based: sum-all": (95.5, None),
    },
    "8": {
        "80% / 10% / 10%": (84.2, 95.4, 94.9),
        "100% / 0% / 0%": (84.3, 94.9, 94.0),
        "80% / 0% / 20%": (84.1, 95.2, 94.6),
        "80% / 20% / 0%": (84.4, 95.2, 94.7),
        "0% / 20% / 80%": (83.7, 94.8, 94.6),
        "0% / 0% / 100%": (83.6, 94.9, 94.6),
    },
}
GLUE_COLUMNS = {"MNLI-m": "mnli", "QNLI": "qnli", "MRPC": "mrpc", "SST-2": "sst2"}


def glue_dev(table: str, row: str) -> dict[str, float]:
    """A row of Table 5 or 6 as GLUE dev scores by task name: its GLUE columns only, all accuracy."""
    values = zip(ABLATION_COLUMNS[table], ABLATIONS[table][row], strict=True)
    return {GLUE_COLUMNS[c]: v for c, v in values if c in GLUE_COLUMNS}


GLUE_DEV = {"BERT-BASE": glue_dev("5", "BERT_BASE"), "BERT-LARGE": glue_dev("6", "24/1024/16")}
"""The paper's GLUE dev numbers: BERT-BASE's Table 5 row, BERT-LARGE's (24/1024/16) of Table 6."""
