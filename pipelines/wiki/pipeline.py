"""``pipelines wikipedia``: pages-articles dumps into documents, multistream dumps read in parallel."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import apache_beam as beam

from pipelines import files
from pipelines.config import WikipediaConfig
from pipelines.progress import ShowProgress
from pipelines.shuffle import runs_locally
from pipelines.stage import (
    DROPPED,
    FILE_ERROR,
    CountRecords,
    Outcome,
    WriteStageOutput,
    reject_outcome,
    sentences_outcome,
)
from pipelines.text import garbled_text, paragraphs_to_sentences
from pipelines.wiki.dump import (
    RawPage,
    index_path_for,
    iter_pages,
    iter_range_pages,
    plan_stream_ranges,
    read_stream_offsets,
)
from pipelines.wiki.wikitext import clean_wikitext
from schemas import storage
from schemas.rejects import Rejection

SOURCE = "wikipedia"
ARTICLE_NAMESPACE = 0
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadTask:
    """One unit of reading: a whole file, a byte range of bz2 streams, or an unreadable index (``defect``)."""

    path: str
    start: int | None = None
    end: int | None = None
    defect: Rejection | None = None


def is_index_file(path: str) -> bool:
    """Whether a path is a multistream index rather than a dump."""
    name = path.rsplit("/", 1)[-1]
    return "-index" in name and ".txt" in name


def plan_reads(path: str, streams_per_range: int) -> list[ReadTask]:
    """A multistream dump with an index as stream ranges; any other file whole."""
    index_path = index_path_for(path)
    if index_path is None or not files.exists(index_path):
        return [ReadTask(path)]
    with files.open_binary(index_path) as index:
        offsets = read_stream_offsets(index)
    if isinstance(offsets, Rejection):
        return [ReadTask(path), ReadTask(index_path, defect=offsets)]
    if not offsets:
        return [ReadTask(path)]
    ranges = plan_stream_ranges(offsets, files.file_size(path), streams_per_range)
    return [ReadTask(path, start, end) for start, end in ranges]


def read_task(task: ReadTask) -> Iterator[RawPage | Outcome]:
    """Yield the pages of one read task; a corrupt file ends in one file-error outcome."""
    num_pages, defect = 0, task.defect
    if defect is None:
        with files.open_binary(task.path) as f:
            pages = iter_pages(f) if task.start is None else iter_range_pages(f, task.start, task.end)
            for page in pages:
                if isinstance(page, Rejection):
                    defect = page
                    break
                num_pages += 1
                yield page
    if defect is not None:
        where = "" if task.start is None else f" (bytes {task.start}-{task.end})"
        kept = (
            f"; the {num_pages} pages before it were kept"
            if task.defect is None
            else "; the dump is read whole"
        )
        detail = f"{defect.detail}{where}{kept if num_pages or task.defect else ''}"
        yield reject_outcome(SOURCE, task.path, "file", defect.reason, detail, kind=FILE_ERROR)


def page_outcome(page: RawPage, origin: str, min_document_words: int) -> Outcome:
    """Clean one page into a document, or say why it was dropped or rejected."""
    if page.redirect_title is not None:
        return Outcome(DROPPED, "redirect")
    if page.ns != ARTICLE_NAMESPACE:
        return Outcome(DROPPED, "not_article_namespace")
    try:
        garbled = garbled_text(page.text)
        if garbled is None:
            cleaned = clean_wikitext(page.text, page.title)
            sentences = paragraphs_to_sentences(cleaned.paragraphs, normalized=True)
    except Exception as err:  # A parser failure on one page must never stop the file.
        garbled = "parse_error", f"{type(err).__name__}: {err}"[:500]
    if garbled is not None:
        return reject_outcome(
            SOURCE, origin, str(page.page_id), *garbled, title=page.title, excerpt=page.text
        )
    if cleaned.is_disambiguation:
        return Outcome(DROPPED, "disambiguation")
    return sentences_outcome(
        sentences,
        min_document_words,
        counts={
            "templates_rendered": cleaned.num_templates_rendered,
            "templates_dropped": cleaned.num_templates_dropped,
        },
        source=SOURCE,
        origin=origin,
        title=page.title,
        page_id=page.page_id,
        revision_id=page.revision_id,
    )


class _ReadPages(beam.DoFn):
    """Read a task's pages, keyed by origin file; file errors go to a tagged output."""

    FILE_ERRORS = "file_errors"

    def process(self, task: ReadTask):
        for item in read_task(task):
            if isinstance(item, Outcome):
                _LOG.warning("%s: %s", task.path, item.row["detail"])  # the command's error says it too
                yield beam.pvalue.TaggedOutput(self.FILE_ERRORS, item)
            else:
                yield task.path, item


def build(pipeline: beam.Pipeline, config: WikipediaConfig, inputs: list[str], out: storage.Folder) -> None:
    """Add the Wikipedia stage to ``pipeline`` for already-expanded ``inputs``."""
    dumps = [f for f in inputs if not is_index_file(f)]
    read = (
        pipeline
        | "Dump files" >> beam.Create(dumps)
        | "Plan reads" >> beam.FlatMap(plan_reads, config.streams_per_range)
        | "Spread reads" >> beam.Reshuffle()
        | "Read pages" >> beam.ParDo(_ReadPages()).with_outputs(_ReadPages.FILE_ERRORS, main="pages")
    )
    pages = read.pages
    if not runs_locally(pipeline):  # a local runner would hold every page
        pages = pages | "Spread pages" >> beam.Reshuffle()
    pages = pages | "Progress" >> beam.ParDo(ShowProgress("pipelines wikipedia: cleaning", "pages"))
    outcomes = pages | "Clean pages" >> beam.MapTuple(
        lambda origin, page: page_outcome(page, origin, config.min_document_words)
    )
    pages_read = pages | "Count pages" >> CountRecords()
    _ = (outcomes, read[_ReadPages.FILE_ERRORS]) | "Write" >> WriteStageOutput(
        out, "pipelines wikipedia", config, extra_tallies=[pages_read], input_files=inputs
    )
