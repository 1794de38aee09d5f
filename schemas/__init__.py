"""On-disk formats shared by every stage: Arrow record formats, manifests, markers; and how every
stage writes a file (``files.py``) and ends a command (``commands.py``).

This package imports pyarrow only (never Beam or torch), so any stage and any outside reader can
depend on it; ``files.py`` adds fsspec and ``commands.py`` click, both core dependencies.
"""

from schemas.documents import DOCUMENTS
from schemas.formats import RecordFormat, SchemaError
from schemas.manifest import (
    COMPLETED_FILE,
    MANIFEST_FILE,
    STATS_FILE,
    VOCAB_FILE,
    IndexReference,
    Manifest,
    ManifestError,
    ManifestVocabulary,
    ShardEntry,
    VocabFile,
    absolute_reference,
    completed_marker,
    manifest_vocabulary,
    verify_completed,
)
from schemas.rejects import REJECTS
from schemas.word_counts import WORD_COUNTS

FORMATS: dict[str, RecordFormat] = {f.name: f for f in (DOCUMENTS, REJECTS, WORD_COUNTS)}

__all__ = [
    "COMPLETED_FILE",
    "DOCUMENTS",
    "FORMATS",
    "IndexReference",
    "MANIFEST_FILE",
    "REJECTS",
    "STATS_FILE",
    "VOCAB_FILE",
    "WORD_COUNTS",
    "Manifest",
    "ManifestError",
    "ManifestVocabulary",
    "RecordFormat",
    "SchemaError",
    "ShardEntry",
    "VocabFile",
    "absolute_reference",
    "completed_marker",
    "manifest_vocabulary",
    "verify_completed",
]
