"""`run_toc_query` end to end on an ingested corpus with the tiny SmolLM2 model: leaves with path, text, locator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata.config import Settings
from strata.pipeline.ingest import ingest
from strata.store import open_store
from strata.toc.query import format_toc_answer, leaf_vectors, resolve_document, run_toc_query

CHAPTERS = {
    "Sleep": {"Stages of Sleep": "REM sleep is when most dreaming happens.", "Insomnia": "Insomnia is poor sleep."},
    "Memory": {"Encoding": "Encoding turns perception into memory.", "Forgetting": "Forgetting grows with time."},
}
# Settings every test here runs with (as strings: the CLI test passes them as flags): the tiny packaged model.
TINY_MODEL = {"index.dense": "false", "llm.model": "packaged:smollm2-135m", "llm.cache": "false",
              "toc.context_tokens": "2048", "toc.train_model": "packaged:smollm2-135m"}


def write_book(folder: Path) -> Path:
    """A tiny OpenStax-style book folder: toc.json and sections.jsonl."""
    folder.mkdir()
    toc = {"type": "book", "title": "Tiny Psychology", "children": []}
    lines = []
    for c, (chapter, modules) in enumerate(CHAPTERS.items()):
        node = {"type": "chapter", "title": chapter, "children": []}
        for m, (title, text) in enumerate(modules.items()):
            module_id = f"m{c}{m}"
            node["children"].append({"type": "section", "title": title, "module_id": module_id})
            lines.append({"module_id": module_id, "book": "tiny-psychology", "title": title, "text": text})
        toc["children"].append(node)
    (folder / "toc.json").write_text(json.dumps(toc))
    (folder / "sections.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    return folder


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> Settings:
    home = tmp_path_factory.mktemp("home")
    settings = Settings.load(
        overrides={**TINY_MODEL, "store.home": str(home), "toc.induced_leaves": "2", "index.embedding.threads": "1"}
    )
    corpus = home / "abstracts.jsonl"
    corpus.write_text(json.dumps({"_id": "flat-doc", "title": "A Flat Note", "text": "Tides follow the moon. " * 30}))
    report = ingest([write_book(home / "book"), corpus], settings)
    assert not report.errors
    return settings


def asked_zero_shot(settings: Settings) -> Settings:
    return settings.model_copy(update={"toc": settings.toc.model_copy(update={"without_adapter": "zero-shot"})})


def test_without_an_adapter_leaf_search_answers_and_the_llm_is_not_loaded(settings, monkeypatch):
    import strata.toc.query as query

    monkeypatch.setattr(query, "make_client", lambda *a, **k: pytest.fail("no LLM is needed for leaf search"))
    answer = run_toc_query(settings, "Tiny Psychology", "Why do we forget things?", k=2)
    assert answer.method == "bm25" and answer.hits[0].path[-1] == "Forgetting"  # index.dense is off here
    dense = settings.model_copy(update={"index": settings.index.model_copy(update={"dense": True})})
    answer = run_toc_query(dense, "Tiny Psychology", "When does most dreaming happen?", k=2)
    assert answer.method == "hybrid" and answer.hits[0].path[-1] == "Stages of Sleep"
    assert len(list(leaf_vectors(dense).glob("*.npy"))) == 1  # the next question on it does not embed the book again


def test_the_answer_is_a_real_leaf_with_its_path_locator_and_exact_text(settings):
    answer = run_toc_query(asked_zero_shot(settings), "Tiny Psychology", "Why do we forget things?", k=2)
    assert answer.paper_id == "tiny-psychology" and answer.method == "zero-shot" and not answer.induced
    assert len(answer.hits) == 2 and [hit.rank for hit in answer.hits] == [1, 2]
    texts = {text for modules in CHAPTERS.values() for text in modules.values()}
    with open_store(settings) as store:
        paper_text = store.paper_text(answer.paper_id)
    for hit in answer.hits:
        assert hit.text in texts and len(hit.path) == 2
        assert paper_text[hit.locator.char_start : hit.locator.char_end] == hit.text
    printed = format_toc_answer(answer)
    assert answer.hits[0].label in printed and "locator: tiny-psychology#" in printed


def test_a_document_without_an_outline_is_answered_from_an_induced_toc(settings):
    answer = run_toc_query(settings, "flat-doc", "What do tides follow?", k=1)
    assert answer.induced and len(answer.hits) == 1 and "Tides follow the moon." in answer.hits[0].text


def test_an_unknown_document_is_a_clear_error(settings):
    with open_store(settings) as store, pytest.raises(KeyError, match="no document with id or title 'Nope'"):
        resolve_document(store, "Nope")


def test_strata_train_toc_saves_the_adapter_that_strata_toc_then_answers_with(tmp_path, capsys):
    from strata import cli

    flags = {**TINY_MODEL, "store.home": str(tmp_path / "home"), "toc.questions_per_leaf": "2",
             "toc.batch_size": "2", "toc.max_steps": "2", "toc.eval_every_steps": "2", "toc.threads": "1",
             "toc.question_cache": str(tmp_path / "questions")}
    settings = Settings.load(overrides=flags)
    assert not ingest([write_book(tmp_path / "book")], settings).errors
    argv = [item for name, value in flags.items() for item in (f"--{name}", value)]
    assert cli.main(["train-toc", "Tiny Psychology", *argv]) == 0
    assert "STAIR adapter saved to" in capsys.readouterr().out
    assert (tmp_path / "home" / "toc" / "adapters" / "tiny-psychology" / "stair").is_dir()

    folder = tmp_path / "home" / "toc" / "adapters" / "tiny-psychology" / "stair"
    meta = json.loads((folder / "strata_toc_adapter.json").read_text())
    assert meta["fusion"]["metric"] == "dev R@1" and meta["fusion"]["queries"] >= 1  # the leaves with 2+ questions
    assert meta["adapt_toc"] is False and meta["answer_format"] == "title (number)"
    leaves = {(chapter, title) for chapter, modules in CHAPTERS.items() for title in modules}
    # Fused with hybrid search by default; the adapter alone over the whole ToC with no candidates asked for.
    for fusion_candidates, method in [(10, "stair-fused"), (0, "stair-adapter")]:
        asked = settings.model_copy(
            update={"toc": settings.toc.model_copy(update={"fusion_candidates": fusion_candidates})}
        )
        answer = run_toc_query(asked, "Tiny Psychology", "Why do we forget things?", k=2)
        assert answer.method == method and len(answer.hits) == 2
        assert all(tuple(hit.path) in leaves for hit in answer.hits)


def test_a_whole_real_book_too_long_for_the_context_still_answers_with_its_real_leaves(tmp_path, shared_data):
    """psychology-2e's ToC (~5k tokens) in a 2,048-token context: collapsed or windowed, never a crash."""
    from strata.eval.toc import load_toc_queries
    from strata.toc.tree import document_toc

    book = shared_data / "openstax-toc-qa" / "psychology-2e" / "derived"
    settings = Settings.load(overrides={**TINY_MODEL, "store.home": str(tmp_path / "home"),
                                        "toc.without_adapter": "zero-shot"})  # fmt: skip
    assert not ingest([book], settings).errors
    query = load_toc_queries(book)[0]
    answer = run_toc_query(settings, "psychology-2e", query.question, k=3)
    with open_store(settings) as store:
        paper = store.get_paper("psychology-2e")
    leaves = {leaf.path for leaf in document_toc(paper).leaves()}
    assert len(leaves) > 300 and answer.method == "zero-shot" and len(answer.hits) == 3
    for hit in answer.hits:
        assert tuple(hit.path) in leaves
        assert paper.text[hit.locator.char_start : hit.locator.char_end] == hit.text


def test_the_adapter_alone_ranks_through_the_decoder_shared_with_evaluation(tmp_path, monkeypatch):
    """`strata toc` with an adapter and no fusion answers through `decode.rank_questions`, as evaluation does."""
    from strata.toc import adapter, decode, query
    from toc_support import book, tiny_model, tiny_tokenizer

    toc = book()
    tokenizer = tiny_tokenizer(toc)
    model = tiny_model(tokenizer)
    meta = adapter.AdapterMeta(mode="stair", base_model="tiny", paper_ids=[toc.paper_id], lora_r=1, lora_alpha=1)
    monkeypatch.setattr(adapter, "load_base_model", lambda *args: (model, tokenizer, "tiny"))
    monkeypatch.setattr(adapter, "load_adapter", lambda base, *args: base)
    monkeypatch.setattr(adapter, "read_adapter_meta", lambda folder: meta)
    rank_questions, methods = decode.rank_questions, []

    def recorded(method, *args, **kwargs):
        methods.append(method)
        return rank_questions(method, *args, **kwargs)

    monkeypatch.setattr(decode, "rank_questions", recorded)
    settings = Settings.load(overrides={"store.home": str(tmp_path), "toc.fusion_candidates": "0", "toc.device": "cpu"})
    ranking = query._adapter_ranking(settings, tmp_path, toc, "Why do we dream?", 2)
    assert methods == ["stair-adapter"] and ranking.method == "stair-adapter" and len(ranking.leaves) == 2
    assert {leaf.number for leaf in ranking.leaves} <= {leaf.number for leaf in toc.leaves()}
