"""Fixtures of the fault tier: the real-data shards of the end-to-end tier (``pipelines
wikipedia`` -> ``corpus`` -> ``examples`` on the enwiki excerpt, a few seconds, once per module)."""

from tests.e2e.conftest import (  # noqa: F401
    corpus_output,
    gcs_emulator,
    s3_server,
    shards,
    vocab,
    wiki_output,
)
