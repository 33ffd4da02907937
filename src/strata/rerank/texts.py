"""What a listwise prompt shows of a paper: its title and the first words of its abstract (or text)."""

from __future__ import annotations

import hashlib

from strata.store.protocol import PaperStore


class PaperTexts:
    """Title and body words of stored papers, read once per paper."""

    def __init__(self, store: PaperStore) -> None:
        self.store = store
        self._papers: dict[str, tuple[str, list[str]]] = {}

    def _read(self, paper_id: str) -> tuple[str, list[str]]:
        if paper_id not in self._papers:
            paper = self.store.get_paper(paper_id)
            self._papers[paper_id] = (paper.title.strip(), (paper.abstract or paper.text).split())
        return self._papers[paper_id]

    def title(self, paper_id: str) -> str:
        return self._read(paper_id)[0]

    def body(self, paper_id: str) -> list[str]:
        """The abstract's words (the text's when there is no abstract)."""
        return self._read(paper_id)[1]

    def passage(self, paper_id: str, words: int) -> str:
        """'Title. first `words` words of the body': the full-text representation, and (shorter) the truncated
        control."""
        title, body = self._read(paper_id)
        text = " ".join(body[:words])
        return f"{title}. {text}" if title and text else title or text

    def document(self, paper_id: str, words: int) -> str:
        """The feature extractor's input: title line, then the body's first `words` words."""
        title, body = self._read(paper_id)
        return f"Title: {title}\n{' '.join(body[:words])}"

    def content_hash(self, paper_id: str) -> str:
        title, body = self._read(paper_id)
        return hashlib.sha256("\n".join([title, " ".join(body)]).encode()).hexdigest()
