"""The Beam pipelines. Arrow uses the system allocator in their processes unless ARROW_DEFAULT_MEMORY_POOL
says otherwise: what its mimalloc frees, Python does not reuse (`pipelines corpus`, 200 MB: 401 MB, not 344).
fsspec's read-ahead cache says nothing below WARNING unless its level is set: at INFO it logs a line
for every bucket file opened, hundreds of thousands in a Dataflow job's worker logs."""

import logging
import os

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")  # before anything imports Arrow
if logging.getLogger("fsspec.caching").level == logging.NOTSET:
    logging.getLogger("fsspec.caching").setLevel(logging.WARNING)
