"""BEIR datasets: corpus.jsonl, queries.jsonl and qrels/{split}.tsv (Thakur et al., 2021)."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, Field

# Names too generic to identify a dataset; the parent folder names it instead (e.g. scifact/beir).
GENERIC_FOLDER_NAMES = {"beir", "data"}


class BeirQuery(BaseModel):
    id: str
    text: str


class BeirDataset(BaseModel):
    folder: Path
    name: str
    split: str
    corpus_path: Path
    queries: list[BeirQuery] = Field(description="The split's judged queries, in queries.jsonl order")
    qrels: dict[str, dict[str, int]] = Field(description="query id -> document id -> relevance grade")
    fingerprint: str = Field(description="sha256 over the corpus, queries and qrels files")


def load_beir(folder: Path | str, split: str = "test") -> BeirDataset:
    """Load a BEIR dataset folder; raises ValueError naming the file and line of anything malformed."""
    folder = Path(folder)
    corpus, queries_path = folder / "corpus.jsonl", folder / "queries.jsonl"
    qrels_path = folder / "qrels" / f"{split}.tsv"
    missing_files = [str(path.relative_to(folder)) for path in (corpus, queries_path, qrels_path) if not path.is_file()]
    if missing_files:
        raise FileNotFoundError(f"BEIR dataset {folder}: missing {', '.join(missing_files)}")
    qrels = read_qrels(qrels_path)
    texts = read_queries(queries_path)
    missing = sorted(set(qrels) - set(texts))
    if missing:
        raise ValueError(f"{qrels_path}: {len(missing)} judged queries are not in queries.jsonl, e.g. {missing[:3]}")
    return BeirDataset(
        folder=folder,
        name=folder.parent.name if folder.name.lower() in GENERIC_FOLDER_NAMES else folder.name,
        split=split,
        corpus_path=corpus,
        queries=[BeirQuery(id=query_id, text=text) for query_id, text in texts.items() if query_id in qrels],
        qrels=qrels,
        fingerprint=fingerprint_files([corpus, queries_path, qrels_path]),
    )


def read_queries(path: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                queries[str(record["_id"])] = str(record["text"])
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not a BEIR query ({{'_id', 'text'}}): {error}") from error
    return queries


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id -> doc id -> grade, from a TSV with an optional 'query-id corpus-id score' header."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t"), start=1):
            if not row or (number == 1 and row[0] == "query-id"):
                continue
            try:
                query_id, doc_id, grade = row
                qrels.setdefault(query_id, {})[doc_id] = int(grade)
            except ValueError as error:
                raise ValueError(f"{path}:{number}: expected 'query-id<TAB>corpus-id<TAB>score', got {row}") from error
    return qrels


def write_subset(dataset: BeirDataset, folder: Path, queries: int, documents: int) -> Path:
    """A smaller BEIR dataset in `folder`: the first `queries` judged queries, all their judged documents, and the
    first other corpus documents up to `documents` in all, for quick evaluations and tests."""
    kept = dataset.queries[:queries]
    qrels = {query.id: dataset.qrels[query.id] for query in kept}
    judged = {doc_id for docs in qrels.values() for doc_id in docs}
    others = documents - len(judged)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    corpus_path = folder / "corpus.jsonl"
    with dataset.corpus_path.open(encoding="utf-8") as source, corpus_path.open("w", encoding="utf-8") as corpus:
        for line in source:
            if not line.strip():
                continue
            if str(json.loads(line)["_id"]) in judged:
                corpus.write(line)
            elif others > 0:
                corpus.write(line)
                others -= 1
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"_id": query.id, "text": query.text}) + "\n" for query in kept)
    with (folder / "qrels" / f"{dataset.split}.tsv").open("w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        handle.writelines(f"{qid}\t{doc}\t{grade}\n" for qid, docs in qrels.items() for doc, grade in docs.items())
    return folder


def fingerprint_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
