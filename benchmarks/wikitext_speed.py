"""Measure how fast ``clean_wikitext`` cleans real Wikipedia pages, on one core.

Usage::

    .venv/bin/python benchmarks/wikitext_speed.py [--repeats N]

Reads the non-redirect pages of the enwiki excerpt in ``../shared/data/wiki`` (the data folder
next to the project; the script exits with a one-line message when it is absent), then cleans
them all ``--repeats`` times in this process and prints the median rate in MB/s (UTF-8 bytes of
wikitext) and pages/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
ENWIKI = DATA_DIR / "wiki" / "gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"

sys.path.insert(0, str(REPO_ROOT))

from pipelines.wiki.dump import iter_pages  # noqa: E402
from pipelines.wiki.wikitext import clean_wikitext  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the median is reported")
    args = parser.parse_args()
    if not ENWIKI.exists():
        sys.exit(f"enwiki excerpt not found at {ENWIKI} (a shared/data checkout next to the repository)")
    with open(ENWIKI, "rb") as f:
        pages = [(page.title, page.text) for page in iter_pages(f) if page.redirect_title is None]
    megabytes = sum(len(text.encode("utf-8")) for _, text in pages) / 1e6
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for title, text in pages:
            clean_wikitext(text, title)
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    print(
        f"{len(pages)} pages, {megabytes:.2f} MB of wikitext, median of {args.repeats} runs: {median:.2f} s"
    )
    print(f"{megabytes / median:.2f} MB/s, {len(pages) / median:.1f} pages/s")


if __name__ == "__main__":
    main()
