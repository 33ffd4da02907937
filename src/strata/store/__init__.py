"""The corpus store: papers, sections, chunks, references and the citation graph."""

from strata.config import Settings
from strata.store.sqlite import CorpusStore


def open_store(settings: Settings) -> CorpusStore:
    return CorpusStore(settings.store.home / "corpus.sqlite3")


__all__ = ["CorpusStore", "open_store"]
