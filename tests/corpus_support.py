"""A small corpus (BM25 only, or with dense vectors) built in a test's temporary folder from (title, body) pairs, one
Results section each."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from strata.config import Settings
from strata.corpus import Corpus
from strata.documents.builder import PaperBuilder


@contextmanager
def bm25_corpus(
    folder: Path, papers: Mapping[str, tuple[str, str]], dense: bool = False
) -> Iterator[tuple[Settings, Corpus]]:
    settings = Settings.load(overrides={"store.home": str(folder / "home"), "index.dense": dense})
    with Corpus.open(settings) as corpus:
        for paper_id, (title, body) in papers.items():
            builder = PaperBuilder(paper_id, "test")
            builder.open_section("Results", level=1, page=1)
            builder.add_block(body, page=1)
            corpus.store.put_paper(builder.build(title=title), f"sha-{paper_id}")
        corpus.index.sync()
        yield settings, corpus
