"""Evaluation datasets behind one interface: a `Dataset` of typed `EvalQuery` records plus the corpus to ingest.

A new benchmark is a loader (folder, split) -> Dataset registered in `LOADERS`. Gold is expressed in Strata's own
ids, so rankings can be scored without translation: paper ids as the parsers make them (BEIR `_id`s, the book id of
an OpenStax folder, `safe_paper_id` of a PDF's file name) and section paths as in `Section.path`.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from strata.documents.identifiers import normalize_doi, safe_paper_id
from strata.eval.beir import fingerprint_files  # one file-hashing rule for every dataset
from strata.eval.beir import load_beir

DatasetKind = Literal["beir", "scifact", "openstax", "litqa2"]
ALL = "all"


class GoldSection(BaseModel):
    model_config = ConfigDict(frozen=True)

    paper_id: str
    path: tuple[str, ...] = Field(description="Section titles from the root down, as in Section.path")


class Rationale(BaseModel):
    """Evidence sentences of one paper for a claim (SciFact)."""

    paper_id: str
    sentence_ids: list[int] = Field(description="Indices into the paper's abstract sentences")
    label: Literal["SUPPORT", "CONTRADICT"]
    sentences: list[str] = Field(description="The evidence sentences, in `sentence_ids` order")


class EvalQuery(BaseModel):
    id: str
    text: str
    kind: str | None = Field(default=None, description="Question type where the dataset has one")
    gold_papers: dict[str, int] = Field(default_factory=dict, description="Paper id -> relevance grade")
    gold_sections: list[GoldSection] = Field(default_factory=list)
    options: list[str] = Field(default_factory=list, description="Answer options of a multiple-choice question")
    correct_option: int | None = Field(default=None, description="Index of the right answer in `options`")
    reference_answer: str | None = Field(default=None, description="Model answer of a free-text question")
    key_passages: list[str] = Field(default_factory=list, description="Gold evidence text")
    rationales: list[Rationale] = Field(default_factory=list)


class Dataset(BaseModel):
    name: str
    kind: DatasetKind
    split: str
    folder: Path
    corpus: list[Path] = Field(description="What `strata ingest` takes to build the dataset's corpus")
    queries: list[EvalQuery]
    fingerprint: str = Field(description="sha256 over the files the dataset was read from")

    def qrels(self) -> dict[str, dict[str, int]]:
        """query id -> paper id -> grade, for the queries that have gold papers."""
        return {query.id: dict(query.gold_papers) for query in self.queries if query.gold_papers}


Loader = Callable[[Path, str | None], Dataset]


def load_dataset(folder: Path | str, kind: DatasetKind | None = None, split: str | None = None) -> Dataset:
    """Load any supported dataset; `kind` is recognised from the folder's files when not given."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"dataset folder {folder} does not exist")
    kind = kind or detect_kind(folder)
    if kind not in LOADERS:
        raise ValueError(f"unknown dataset kind {kind!r}; known: {', '.join(LOADERS)}")
    return LOADERS[kind](folder, split)


def detect_kind(folder: Path) -> DatasetKind:
    if (folder / "qrels").is_dir():
        return "beir"
    if any(folder.glob("claims_*.jsonl")):
        return "scifact"
    if (folder / "questions.jsonl").is_file() and (folder / "pdfs").is_dir():
        return "litqa2"
    if _openstax_books(folder):
        return "openstax"
    raise ValueError(f"{folder}: not a recognised dataset folder (BEIR, SciFact original, OpenStax ToC-QA, LitQA2)")


# BEIR


def load_beir_dataset(folder: Path, split: str | None = None) -> Dataset:
    beir = load_beir(folder, split or "test")
    return Dataset(
        name=beir.name,
        kind="beir",
        split=beir.split,
        folder=folder,
        corpus=[beir.corpus_path],
        queries=[EvalQuery(id=query.id, text=query.text, gold_papers=beir.qrels[query.id]) for query in beir.queries],
        fingerprint=beir.fingerprint,
    )


# SciFact, original release (Wadden et al., 2020): claims with rationale sentences


SCIFACT_SPLITS = ("train", "dev", "test")
# The original corpus schema has no Strata parser; the BEIR export beside it holds the same abstracts under the
# same ids (SOURCE.txt), so that is what gets ingested.
SCIFACT_BEIR_CORPUS = Path("..") / "beir" / "corpus.jsonl"


def load_scifact(folder: Path, split: str | None = None) -> Dataset:
    """Claims of one split; gold papers are the cited abstracts (as in BEIR), rationales the evidence sentences.
    The test claims were released without labels, so they carry no gold."""
    split = split or "dev"
    if split not in SCIFACT_SPLITS:
        raise ValueError(f"{folder}: SciFact has splits {', '.join(SCIFACT_SPLITS)}, not {split!r}")
    corpus_path, claims_path = folder / "corpus.jsonl", folder / f"claims_{split}.jsonl"
    beir_corpus = (folder / SCIFACT_BEIR_CORPUS).resolve()
    _require_files(folder, [corpus_path, claims_path, beir_corpus])
    sentences = _scifact_sentences(corpus_path)
    queries = [_scifact_claim(record, sentences, claims_path, number) for number, record in _numbered(claims_path)]
    return Dataset(
        name="scifact-original",
        kind="scifact",
        split=split,
        folder=folder,
        corpus=[beir_corpus],
        queries=queries,
        fingerprint=fingerprint_files([corpus_path, claims_path]),
    )


def _scifact_sentences(path: Path) -> dict[str, list[str]]:
    sentences: dict[str, list[str]] = {}
    for number, record in _numbered(path):
        if "doc_id" not in record or not isinstance(record.get("abstract"), list):
            raise ValueError(f"{path}:{number}: not a SciFact abstract ({{'doc_id', 'abstract': [sentences]}})")
        sentences[str(record["doc_id"])] = [str(sentence) for sentence in record["abstract"]]
    return sentences


def _scifact_claim(record: dict[str, Any], sentences: dict[str, list[str]], path: Path, number: int) -> EvalQuery:
    try:
        rationales = [
            Rationale(
                paper_id=str(doc_id),
                sentence_ids=list(evidence["sentences"]),
                label=evidence["label"],
                sentences=[sentences[str(doc_id)][index].strip() for index in evidence["sentences"]],
            )
            for doc_id, evidences in sorted(record.get("evidence", {}).items())
            for evidence in evidences
        ]
        return EvalQuery(
            id=str(record["id"]),
            text=record["claim"],
            gold_papers={str(doc_id): 1 for doc_id in record.get("cited_doc_ids", [])},
            rationales=rationales,
        )
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise ValueError(f"{path}:{number}: not a SciFact claim with valid evidence: {error!r}") from error


# OpenStax ToC-QA: books whose author-written questions are tied to a section


OPENSTAX_DERIVED = "derived"


def load_openstax(folder: Path, split: str | None = None) -> Dataset:
    """All books under `folder` (or the one book `folder` is); `split` picks one book by name, default all.
    Each book is one paper; the gold section is the question's module path."""
    books = _openstax_books(folder)
    if not books:
        raise FileNotFoundError(f"{folder}: no OpenStax book (expected BOOK/derived/queries.jsonl)")
    split = split or ALL
    if split != ALL:
        books = [book for book in books if book.parent.name == split]
        if not books:
            raise ValueError(f"{folder}: no book named {split!r}")
    queries = [
        _openstax_question(record, book / "queries.jsonl", number)
        for book in books
        for number, record in _numbered(book / "queries.jsonl")
    ]
    files = [book / name for book in books for name in ("toc.json", "sections.jsonl", "queries.jsonl")]
    return Dataset(
        name=books[0].parent.name if len(books) == 1 else folder.name,
        kind="openstax",
        split=split,
        folder=folder,
        corpus=books,
        queries=queries,
        fingerprint=fingerprint_files(files),
    )


def _openstax_books(folder: Path) -> list[Path]:
    """The derived/ folders of the books in `folder` (itself a book, a derived/ folder, or a folder of books)."""
    candidates = [folder, folder / OPENSTAX_DERIVED, *sorted(folder.glob(f"*/{OPENSTAX_DERIVED}"))]
    return [path for path in candidates if path.name == OPENSTAX_DERIVED and (path / "queries.jsonl").is_file()]


def _openstax_question(record: dict[str, Any], path: Path, number: int) -> EvalQuery:
    try:
        options = list(record.get("options") or [])
        answer = record.get("answer")
        paper_id = safe_paper_id(record["book"])  # as the book parser names the book
        return EvalQuery(
            id=record["query_id"],
            text=record["question"],
            kind=record.get("question_type"),
            gold_papers={paper_id: 1},
            gold_sections=[GoldSection(paper_id=paper_id, path=tuple(record["gold_path"]))],
            options=options,
            correct_option=_option_index(answer, options),
            reference_answer=answer if answer and not options else None,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}:{number}: not an OpenStax ToC-QA question: {error!r}") from error


def _option_index(letter: str | None, options: list[str]) -> int | None:
    """'C' -> 2 for a multiple-choice question; None when there are no options or no answer letter."""
    if not options or not letter:
        return None
    index = string.ascii_uppercase.find(letter.strip().upper())
    if len(letter.strip()) != 1 or not 0 <= index < len(options):
        raise ValueError(f"answer {letter!r} is not one of the {len(options)} option letters")
    return index


# LitQA2 (LAB-Bench): multiple-choice questions over the PDFs of their source papers


def load_litqa2(folder: Path, split: str | None = None) -> Dataset:
    """Every question; its gold paper is the PDF of its source DOI, options are `ideal` (index 0) + distractors.
    The order of options is the file's: shuffle before showing them to a model."""
    questions_path, pdfs = folder / "questions.jsonl", folder / "pdfs"
    _require_files(folder, [questions_path])
    if split not in (None, ALL):
        raise ValueError(f"{folder}: LitQA2 has no splits, got {split!r}")
    pdf_files = sorted(pdfs.glob("*.pdf"))
    # The PDF parser names a paper after its file (safe_paper_id of the stem); the stem is the URL-encoded DOI.
    pdf_ids = {normalize_doi(pdf.stem): safe_paper_id(pdf.stem) for pdf in pdf_files}
    queries = [
        _litqa2_question(record, pdf_ids, questions_path, number) for number, record in _numbered(questions_path)
    ]
    return Dataset(
        name="litqa2",
        kind="litqa2",
        split=ALL,
        folder=folder,
        corpus=[pdfs],
        queries=queries,
        fingerprint=fingerprint_files([questions_path, *pdf_files]),
    )


def _litqa2_question(record: dict[str, Any], pdf_ids: dict[str | None, str], path: Path, number: int) -> EvalQuery:
    try:
        dois = [normalize_doi(source) for source in record["sources"]]
        missing = [doi for doi in dois if doi not in pdf_ids]
        if missing:
            raise ValueError(f"no PDF for source {missing[0]} (expected pdfs/{quote(str(missing[0]), safe='')}.pdf)")
        return EvalQuery(
            id=record["id"],
            text=record["question"],
            gold_papers={pdf_ids[doi]: 1 for doi in dois},
            options=[record["ideal"], *record["distractors"]],
            correct_option=0,
            key_passages=[record["key-passage"]],
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}:{number}: not a usable LitQA2 question: {error}") from error


LOADERS: dict[str, Loader] = {
    "beir": load_beir_dataset,
    "scifact": load_scifact,
    "openstax": load_openstax,
    "litqa2": load_litqa2,
}


# file reading shared by the loaders


def _require_files(folder: Path, paths: list[Path]) -> None:
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"dataset {folder}: missing {', '.join(missing)}")


def _numbered(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON-lines file."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not JSON: {error}") from error
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object")
            yield number, record

