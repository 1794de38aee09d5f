"""The whole job end to end: every stage as its own process, resumable, with a report."""

from chain.run import StageFailed

__all__ = ["StageFailed"]
