"""CoRank's compact features: extracted once per document by the LLM (a gist of each of its parsed sections, or for
an abstract-only paper the parts the model finds in its first words), cached by content hash, and cut down to the
query-relevant "Form 4" (category, one section gist, five keywords) at query time.

Cached features are keyed by the paper's content and by what made them (the LLM, the encoder of their section and
keyword vectors, the words the LLM read): features another model made are extracted again, never compared with a
query vector from another encoder."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from strata.config import RerankSettings, Settings
from strata.documents.builder import SENTENCE_END
from strata.encoders.embedder import Embedder, encoder_identity
from strata.llm import LLMClient, LLMError, Prompt
from strata.rerank.model import (
    GIST_CHARS,
    TITLE_CHARS,
    DocumentFeatures,
    PaperFeatures,
    SectionGist,
    SectionGists,
    rerank_prompts,
    section_gists_schema,
)
from strata.rerank.texts import FeatureInput, InputSection, PaperTexts
from strata.progress import Progress, tell

FEATURES_SCHEMA = """
CREATE TABLE IF NOT EXISTS features (
    paper_id TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL,
    model TEXT NOT NULL,
    features TEXT NOT NULL,
    section_vectors BLOB NOT NULL,
    keyword_vectors BLOB NOT NULL
)
"""


class StoredFeatures(BaseModel):
    model_config = {"arbitrary_types_allowed": True}

    features: PaperFeatures
    section_vectors: np.ndarray
    keyword_vectors: np.ndarray

    def packed(self) -> tuple[str, bytes, bytes]:
        """(features JSON, section vectors, keyword vectors as float32 bytes): how the cache and Ray rows hold them."""
        return (
            self.features.model_dump_json(),
            self.section_vectors.astype(np.float32).tobytes(),
            self.keyword_vectors.astype(np.float32).tobytes(),
        )

    @classmethod
    def unpacked(cls, features_json: str, section_vectors: bytes, keyword_vectors: bytes) -> StoredFeatures:
        features = PaperFeatures.model_validate_json(features_json)
        return cls(
            features=features,
            section_vectors=_unpack(section_vectors, len(features.sections)),
            keyword_vectors=_unpack(keyword_vectors, len(features.keywords)),
        )


class ExtractionReport(BaseModel):
    documents: int = Field(description="Documents asked for")
    extracted: int = Field(description="Documents whose features were extracted now (new or changed)")
    cached: int = Field(description="Documents whose cached features matched their content")
    failed: list[str] = Field(default_factory=list, description="Documents whose extraction gave no usable answer")
    seconds: float = 0.0

    @classmethod
    def of_run(cls, documents: int, attempted: int, failed: list[str], started: float) -> ExtractionReport:
        """The report of a run that sent `attempted` of `documents` to the LLM, begun at perf_counter() `started`."""
        return cls(
            documents=documents,
            extracted=attempted - len(failed),
            cached=documents - attempted,
            failed=failed,
            seconds=time.perf_counter() - started,
        )

    def summary(self) -> str:
        return (
            f"features: {self.documents} documents: {self.extracted} extracted, {self.cached} cached, "
            f"{len(self.failed)} failed, {self.seconds:.1f}s"
        )


def features_path(settings: Settings) -> Path:
    return settings.rerank.features_path or Path(settings.store.home) / "rerank" / "features.sqlite3"


def extractor_identity(settings: Settings) -> str:
    """What the features of `settings` depend on besides the paper: the LLM, the vectors' encoder, the words read."""
    embedding = encoder_identity(settings.index.embedding)
    return f"{settings.llm.model}\x00{embedding}\x00{settings.rerank.features_input_words}"


def feature_cache(settings: Settings) -> FeatureCache:
    return FeatureCache(features_path(settings), extractor_identity(settings))


class FeatureCache:
    """SQLite rows of features and their section/keyword embeddings, keyed by paper id and by a hash of the paper's
    content hash and `extractor` (see extractor_identity)."""

    def __init__(self, path: Path, extractor: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.extractor = extractor
        self._db = sqlite3.connect(path)
        self._db.execute(FEATURES_SCHEMA)

    def _key(self, content_hash: str) -> str:
        return hashlib.sha256(f"{self.extractor}\x00{content_hash}".encode()).hexdigest()

    def get(self, paper_id: str, content_hash: str) -> StoredFeatures | None:
        row = self._db.execute(
            "SELECT features, section_vectors, keyword_vectors FROM features WHERE paper_id = ? AND content_hash = ?",
            (paper_id, self._key(content_hash)),
        ).fetchone()
        return None if row is None else StoredFeatures.unpacked(*row)

    def stale(self, paper_ids: Iterable[str], texts: PaperTexts) -> dict[str, str]:
        """Current content hash of each paper (once, in the given order) without cached features for that content:
        what an extraction run sends to the LLM."""
        hashes = {paper_id: texts.content_hash(paper_id) for paper_id in dict.fromkeys(paper_ids)}
        return {paper_id: digest for paper_id, digest in hashes.items() if not self._has(paper_id, digest)}

    def _has(self, paper_id: str, content_hash: str) -> bool:
        query = "SELECT 1 FROM features WHERE paper_id = ? AND content_hash = ?"
        return self._db.execute(query, (paper_id, self._key(content_hash))).fetchone() is not None

    def put(self, paper_id: str, content_hash: str, model: str, stored: StoredFeatures) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO features VALUES (?, ?, ?, ?, ?, ?)",
                (paper_id, self._key(content_hash), model, *stored.packed()),
            )

    def close(self) -> None:
        self._db.close()


def _unpack(blob: bytes, rows: int) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32).reshape(rows, -1)


def section_text(section: SectionGist) -> str:
    return f"{section.title}: {section.gist}"


class CompactFeatures:
    """Extracts features for papers that lack current ones and builds each candidate's Form 4 text."""

    def __init__(
        self,
        cache: FeatureCache,
        texts: PaperTexts,
        embedder: Embedder,
        settings: RerankSettings,
        client: LLMClient | None = None,
    ) -> None:
        self.cache = cache
        self.texts = texts
        self.embedder = embedder
        self.settings = settings
        self.client = client

    def ensure(self, paper_ids: Iterable[str], progress: Progress | None = None) -> ExtractionReport:
        """Extract features for every paper without current cached ones (at most once per content hash), in batches
        of `llm.batch_size` papers (one decoding pass each on a backend that batches)."""
        started = time.perf_counter()
        ids = list(dict.fromkeys(paper_ids))
        todo = list(self.cache.stale(ids, self.texts))
        if todo and self.client is None:
            raise ValueError(f"no features cached for paper {todo[0]!r} and no LLM client to extract them")
        failed = []
        size = self.client.settings.batch_size if self.client is not None else 1
        for start in range(0, len(todo), size):
            tell(progress, "papers", start, len(todo), todo[start])
            failed += self._extract(todo[start : start + size])
        tell(progress, "papers", len(todo), len(todo))
        return ExtractionReport.of_run(len(ids), len(todo), failed, started)

    def _extract(self, paper_ids: list[str]) -> list[str]:
        """Extracts and caches the papers' features; returns the papers whose extraction failed."""
        assert self.client is not None  # ensure checked
        documents = [self.texts.document(paper_id, self.settings.features_input_words) for paper_id in paper_ids]
        failed = []
        for paper_id, stored in zip(paper_ids, extract_documents_features(self.client, self.embedder, documents)):
            if stored is None:
                failed.append(paper_id)
            else:
                self.cache.put(paper_id, self.texts.content_hash(paper_id), self.client.model, stored)
        return failed

    def form4(self, query_vector: np.ndarray, paper_id: str) -> str | None:
        """Category path, the most query-similar section(s) and keywords; None when the paper has no features."""
        stored = self.cache.get(paper_id, self.texts.content_hash(paper_id))
        if stored is None:
            return None
        features = stored.features
        sections = _most_similar(query_vector, stored.section_vectors, self.settings.sections)
        keywords = _most_similar(query_vector, stored.keyword_vectors, self.settings.keywords)
        parts = [f"Category: {' > '.join(features.category)}"]
        parts += [f"Section: {section_text(features.sections[index])}" for index in sections]
        if keywords:
            parts.append(f"Keywords: {', '.join(features.keywords[index] for index in keywords)}")
        return ". ".join(parts)


def extract_document_features(client: LLMClient, embedder: Embedder, document: str) -> StoredFeatures | None:
    """One document's features (`document`: PaperTexts.document's JSON) with their section and keyword embeddings;
    None when the LLM gave no usable answer. The part of extraction that needs no store, so Ray workers run it too."""
    return extract_documents_features(client, embedder, [document])[0]


def extract_documents_features(
    client: LLMClient, embedder: Embedder, documents: list[str]
) -> list[StoredFeatures | None]:
    """`extract_document_features` for many documents, their prompts sent together (`LLMClient.complete_many`)."""
    papers = [FeatureInput.model_validate_json(document) for document in documents]
    answers = client.complete_many([_feature_request(paper) for paper in papers])
    extracted: list[StoredFeatures | None] = []
    for paper, answer in zip(papers, answers, strict=True):
        if isinstance(answer, LLMError):
            extracted.append(None)
            continue
        features = (
            with_paper_sections(answer, paper.sections)  # type: ignore[arg-type]
            if paper.sections
            else PaperFeatures.model_validate(answer.model_dump())
        )
        extracted.append(
            StoredFeatures(
                features=features,
                section_vectors=embedder.embed([section_text(section) for section in features.sections]),
                keyword_vectors=embedder.embed(features.keywords),
            )
        )
    return extracted


def _feature_request(paper: FeatureInput) -> tuple[Prompt, type[BaseModel]]:
    """The prompt and answer schema for a paper: one call listing every parsed section by its title and first
    words, rather than one per section (a small model reads the instructions once, and the category and keywords are
    drawn from all the sections); for an abstract-only paper, its parts (Background, Methods, ...) named by the
    model from its first words."""
    if not paper.sections:
        document = f"Title: {paper.title}\n{paper.body}"
        return rerank_prompts().render("features_extract", document=document), DocumentFeatures
    listing = "\n".join(
        f"[{number}] {section.title}: {section.text}" for number, section in enumerate(paper.sections, start=1)
    )
    prompt = rerank_prompts().render("features_sections", title=paper.title, sections=listing)
    return prompt, section_gists_schema(len(paper.sections))


def with_paper_sections(answer: SectionGists, sections: list[InputSection]) -> PaperFeatures:
    """The answer's gists under the paper's own section titles, matched by position: extra gists are dropped, and a
    missing or blank one is the section's first sentence. Titles are clipped to the bound the model's own titles
    have, which keeps Form 4 short."""
    gists = [*answer.gists, *[""] * len(sections)]
    return PaperFeatures(
        category=answer.category,
        sections=[
            SectionGist(
                title=_clipped(section.title, TITLE_CHARS),
                gist=_clipped(gist.strip() or SENTENCE_END.split(section.text, maxsplit=1)[0], GIST_CHARS),
            )
            for section, gist in zip(sections, gists)
        ],
        keywords=answer.keywords,
    )


def _clipped(text: str, chars: int) -> str:
    """`text` cut to at most `chars` characters, at a word end where there is one."""
    if len(text) <= chars:
        return text
    cut = text[: chars + 1].rsplit(" ", 1)[0]
    return cut if len(cut) <= chars else text[:chars]


def _most_similar(query_vector: np.ndarray, vectors: np.ndarray, keep: int) -> list[int]:
    """Indices of the `keep` rows most cosine-similar to the query (vectors are unit length), ties by position."""
    if keep == 0 or len(vectors) == 0:
        return []
    similarity = vectors @ query_vector
    return sorted(range(len(vectors)), key=lambda index: (-float(similarity[index]), index))[:keep]

