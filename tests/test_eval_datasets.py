"""Dataset loaders on the real files: counts as stated in each SOURCE.txt, gold ids as the parsers make them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from strata.config import Settings
from strata.eval.beir import load_beir
from strata.eval.datasets import detect_kind, load_dataset


def test_beir_scifact_gold_is_its_qrels(shared_data: Path) -> None:
    dataset = load_dataset(shared_data / "scifact" / "beir")
    assert (dataset.kind, dataset.name, dataset.split) == ("beir", "scifact", "test")
    assert dataset.qrels() == load_beir(shared_data / "scifact" / "beir").qrels
    assert len(dataset.queries) == 300 and sum(len(q.gold_papers) for q in dataset.queries) == 339
    train = load_dataset(shared_data / "scifact" / "beir", split="train")
    assert len(train.queries) == 809 and sum(len(q.gold_papers) for q in train.queries) == 919


def test_scifact_original_claims_and_rationales(shared_data: Path) -> None:
    folder = shared_data / "scifact" / "original"
    counts = {split: len(load_dataset(folder, split=split).queries) for split in ("train", "dev", "test")}
    assert counts == {"train": 809, "dev": 300, "test": 300}  # SOURCE.txt
    dev = load_dataset(folder)
    assert dev.split == "dev"
    # SOURCE.txt: BEIR's "test" qrels are the original dev claims x cited_doc_ids.
    assert dev.qrels() == load_beir(shared_data / "scifact" / "beir").qrels
    assert dev.corpus == [(shared_data / "scifact" / "beir" / "corpus.jsonl").resolve()]
    corpus = {record["_id"]: record["text"] for record in map(json.loads, dev.corpus[0].open())}
    assert len(corpus) == 5183
    rationales = [(q, r) for q in dev.queries for r in q.rationales]
    assert rationales and {r.label for _, r in rationales} == {"SUPPORT", "CONTRADICT"}
    for query, rationale in rationales:
        assert rationale.paper_id in query.gold_papers
        assert len(rationale.sentences) == len(rationale.sentence_ids)
        assert all(sentence and sentence in corpus[rationale.paper_id] for sentence in rationale.sentences)
    assert not any(q.gold_papers or q.rationales for q in load_dataset(folder, split="test").queries)  # unlabelled


def test_openstax_questions_point_at_sections_of_the_parsed_book(shared_data: Path) -> None:
    from strata.documents.parsers.book import PARSER

    root = shared_data / "openstax-toc-qa"
    everything = load_dataset(root)
    assert (everything.kind, everything.name, len(everything.queries)) == ("openstax", "openstax-toc-qa", 1146)
    psychology = load_dataset(root / "psychology-2e")
    sociology = load_dataset(root, split="introduction-sociology-3e")
    # SOURCE.txt: 589 questions over 88 sections, and 557 over 74.
    for dataset, questions, sections in ((psychology, 589, 88), (sociology, 557, 74)):
        assert len(dataset.queries) == questions
        assert len({q.gold_sections[0].path for q in dataset.queries}) == sections
    assert Counter(q.kind for q in psychology.queries) == {
        "review-questions": 311, "critical-thinking": 171, "personal-application": 107
    }
    assert Counter(q.kind for q in sociology.queries) == {"section-quiz": 371, "short-answer": 186}
    first = psychology.queries[0]  # answer 'D' of four options
    assert first.correct_option == 3 and first.options[3] == "all of the above"
    assert any(q.reference_answer for q in psychology.queries if q.kind == "critical-thinking")

    book = next(PARSER.parse(psychology.corpus[0], Settings.load().parsing))
    paths = {section.path for section in book.walk_sections()}
    assert {paper for q in psychology.queries for paper in q.gold_papers} == {book.id}
    assert all(q.gold_sections[0].paper_id == book.id and q.gold_sections[0].path in paths for q in psychology.queries)


def test_litqa2_gold_papers_are_the_ids_of_the_parsed_pdfs(shared_data: Path) -> None:
    from strata.documents.parsers.pdf import PARSER

    folder = shared_data / "litqa2"
    dataset = load_dataset(folder)
    assert (dataset.kind, len(dataset.queries), dataset.corpus) == ("litqa2", 23, [folder / "pdfs"])
    assert len(list((folder / "pdfs").glob("*.pdf"))) == 39  # SOURCE.txt
    for query in dataset.queries:
        assert len(query.gold_papers) == 1 and query.key_passages[0]
        assert query.correct_option == 0 and len(query.options) >= 2
    manifest = json.loads((folder / "pdf_manifest.json").read_text())
    smallest = min(manifest, key=lambda entry: entry["pages"])
    paper = next(PARSER.parse(folder / "pdfs" / smallest["file"], Settings.load().parsing))
    citing = {q.id for q in dataset.queries if paper.id in q.gold_papers}
    assert citing == set(smallest["litqa2_question_ids"])


def test_kinds_are_recognised_from_the_files(shared_data: Path, tmp_path: Path) -> None:
    assert detect_kind(shared_data / "scifact" / "beir") == "beir"
    assert detect_kind(shared_data / "scifact" / "original") == "scifact"
    assert detect_kind(shared_data / "openstax-toc-qa") == "openstax"
    assert detect_kind(shared_data / "openstax-toc-qa" / "psychology-2e" / "derived") == "openstax"
    assert detect_kind(shared_data / "litqa2") == "litqa2"
    with pytest.raises(ValueError, match="not a recognised dataset"):
        detect_kind(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset(tmp_path / "nowhere")


def test_bad_records_are_reported_by_file_and_line(shared_data: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="splits train, dev, test"):
        load_dataset(shared_data / "scifact" / "original", split="validation")
    with pytest.raises(ValueError, match="no book named"):
        load_dataset(shared_data / "openstax-toc-qa", split="physics")

    book = tmp_path / "book" / "derived"
    book.mkdir(parents=True)
    good = {"query_id": "b:1", "book": "b", "question": "q?", "options": ["x", "y"], "answer": "B",
            "question_type": "quiz", "gold_path": ["Ch", "Sec"]}
    (book / "queries.jsonl").write_text(json.dumps(good) + "\n\n" + json.dumps({**good, "answer": "E"}) + "\n")
    with pytest.raises(ValueError, match=r"queries.jsonl:3: .*'E' is not one of the 2 option letters"):
        load_dataset(tmp_path / "book")

    litqa = tmp_path / "litqa"
    (litqa / "pdfs").mkdir(parents=True)
    (litqa / "pdfs" / "10.1000%2Fabc.pdf").write_bytes(b"%PDF-1.4")
    record = {"id": "q1", "question": "?", "ideal": "a", "distractors": ["b"], "key-passage": "p",
              "sources": ["https://doi.org/10.1000/ABC"]}
    (litqa / "questions.jsonl").write_text(json.dumps(record) + "\n")
    assert load_dataset(litqa).queries[0].gold_papers == {"10.1000_abc": 1}  # DOIs match case-insensitively
    (litqa / "questions.jsonl").write_text(json.dumps({**record, "sources": ["https://doi.org/10.1000/xyz"]}) + "\n")
    with pytest.raises(ValueError, match=r"questions.jsonl:1: .*no PDF for source 10.1000/xyz"):
        load_dataset(litqa)
