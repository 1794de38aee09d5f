"""The whole job end to end: every stage as its own process, resumable, with a report."""
