"""How fast ``clean_wikitext`` cleans real Wikipedia pages, on one core.

    python benchmarks/wikitext_speed.py [--repeats 3]

The non-redirect pages of the enwiki excerpt in ``../shared/data/wiki``, cleaned ``--repeats``
times in this process; the median rate in MB/s (UTF-8 bytes of wikitext) and pages/s. No peer:
``corpus.py`` sets the whole Wikipedia stage beside WikiExtractor.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n


def main() -> None:
    from pipelines.wiki.dump import iter_pages
    from pipelines.wiki.wikitext import clean_wikitext

    parser = harness.parser(__doc__, "wikitext_speed")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the median is reported")
    args = parser.parse_args()
    harness.require(harness.WIKI_DUMP)
    with open(harness.WIKI_DUMP, "rb") as f:
        pages = [(page.title, page.text) for page in iter_pages(f) if page.redirect_title is None]
    megabytes = sum(len(text.encode("utf-8")) for _, text in pages) / 1e6
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for title, text in pages:
            clean_wikitext(text, title)
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    result = {
        "pages": len(pages),
        "wikitext_mb": megabytes,
        "repeats": args.repeats,
        "median_s": median,
        "mb_per_s": megabytes / median,
        "pages_per_s": len(pages) / median,
    }
    harness.write(args.json, result, rows=rows)


def rows(r: dict) -> list[Row]:
    return [
        (
            f"`clean_wikitext` alone; {r['pages']} pages without redirects, {n(r['wikitext_mb'])} MB of wikitext, 1 core",
            f"{n(r['mb_per_s'])} MB/s, {n(r['pages_per_s'])} pages/s",
            "—",
            "—",
        )
    ]


if __name__ == "__main__":
    main()
