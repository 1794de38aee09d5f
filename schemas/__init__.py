"""On-disk formats shared by every stage: Arrow record formats, manifests, markers; how every stage
reaches a file (``storage.py``), owns its output (``outputs.py``) and ends a command (``commands.py``).

This package imports pyarrow, fsspec and click only (never Beam or torch), so any stage and any
outside reader can depend on it.
"""

from schemas.documents import DOCUMENTS
from schemas.formats import RecordFormat
from schemas.manifest import (
    COMPLETED_FILE,
    MANIFEST_FILE,
    STATS_FILE,
    VOCAB_FILE,
    Manifest,
    ShardEntry,
    VocabFile,
    absolute_reference,
    completed_marker,
    manifest_vocabulary,
    verify_completed,
)
from schemas.rejects import REJECTS
from schemas.word_counts import WORD_COUNTS

__all__ = ["COMPLETED_FILE", "DOCUMENTS", "MANIFEST_FILE", "REJECTS", "STATS_FILE", "VOCAB_FILE"]
__all__ += ["WORD_COUNTS", "Manifest", "RecordFormat", "ShardEntry", "VocabFile", "absolute_reference"]
__all__ += ["completed_marker", "manifest_vocabulary", "verify_completed"]
