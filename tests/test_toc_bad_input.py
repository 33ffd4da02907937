"""Bad input to `strata toc` and `strata train-toc`, without any model: a ToC longer than the context (windowed
zero-shot, a clear error naming the limit for the adapter), a ToC of one leaf, leaves without text, an unknown id."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from strata import cli
from strata.config import Settings, TocSettings
from strata.documents.builder import PaperBuilder
from strata.documents.model import Paper
from strata.llm.backend import ContinuationScore
from strata.store import open_store
from strata.toc.encode import PromptEncoder
from strata.toc.query import answer_from_toc, format_toc_answer
from strata.toc.retriever import TocRetriever
from strata.toc.tree import document_toc, render_toc
from strata.train.toc import check_trainable


def book(paper_id: str, chapters: int, sections: int, text: bool = True) -> Paper:
    builder = PaperBuilder(paper_id, "test")
    for c in range(1, chapters + 1):
        builder.open_section(f"Chapter {c}", 1)
        for s in range(1, sections + 1):
            builder.open_section(f"Topic {c} {s}", 2)
            if text:
                builder.add_block(f"Topic {c} {s} is about subject number {c * 10 + s}.")
    return builder.build(title=f"Book {paper_id}")


def one_leaf_paper(text: bool = True) -> Paper:
    builder = PaperBuilder("one-leaf", "test")
    builder.open_section("Everything", 1)
    if text:
        builder.add_block("All there is to say, in one section.")
    return builder.build(title="A Single Section")


class WordTokenizer:
    """One token per whitespace-separated word: what PromptEncoder.toc_text uses of a tokenizer."""

    eos_token_id = 1

    def __call__(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        return SimpleNamespace(input_ids=list(range(len(text.split()))))


class NoModel:
    """Stands in for make_client / a model loader: fails the test if anything tries to load a model."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __call__(self, *args, **kwargs):
        raise AssertionError(f"{self.what} was called: no model should be needed here")


def store_with(tmp_path: Path, *papers: Paper) -> tuple[Settings, list[str]]:
    home = tmp_path / "home"
    home.mkdir()
    settings = Settings.load(overrides={"store.home": str(home)})
    with open_store(settings) as store:
        for paper in papers:
            store.put_paper(paper, f"sha-{paper.id}")
    return settings, ["--store.home", str(home)]


# A ToC longer than the context


def test_a_toc_over_the_context_is_refused_for_the_adapter_with_its_size_the_limit_and_the_fix():
    toc = document_toc(book("long-book", chapters=4, sections=4))
    size = len(render_toc(toc).split())
    fits = PromptEncoder(WordTokenizer(), TocSettings(context_tokens=1024, answer_reserve_tokens=1024 - size))
    assert fits.toc_text(toc) == render_toc(toc)  # exactly at the budget: accepted
    over = PromptEncoder(WordTokenizer(), TocSettings(context_tokens=1024, answer_reserve_tokens=1025 - size))
    with pytest.raises(ValueError) as error:
        over.toc_text(toc)
    message = str(error.value)
    assert message.startswith(f"long-book: the ToC is {size} tokens, more than the {size - 1} that")
    for part in ("toc.context_tokens (1024)", f"toc.answer_reserve_tokens ({1025 - size})", "whole ToC in one prompt",
                 "raise toc.context_tokens to at least 2048", "--toc.context_tokens 2048", "smaller document"):
        assert part in message


class ScoringClient:
    """A client without token access (as over HTTP): a label scores 0 if it ends with a wanted title, else -5."""

    backend = object()

    def __init__(self, *wanted: str) -> None:
        self.wanted = wanted
        self.prompts: list[str] = []

    def score(self, prompt, continuations):
        self.prompts.append(prompt.user)
        return [ContinuationScore(continuation=c, logprob=0.0 if c.endswith(self.wanted) else -5.0, n_tokens=1)
                for c in continuations]


def test_zero_shot_shows_a_toc_over_the_context_in_windows_that_fit_and_still_finds_any_leaf():
    toc = document_toc(book("long-book", chapters=12, sections=3))
    settings = TocSettings(context_tokens=1024, answer_reserve_tokens=1000, top_k=1)  # 24 tokens for the ToC
    client = ScoringClient("Chapter 11", "Topic 11 2")
    ranking = TocRetriever(client, settings).rank(toc, "What is subject 112 about?")  # type: ignore[arg-type]
    assert [leaf.path for leaf in ranking.leaves] == [("Chapter 11", "Topic 11 2")]
    views = TocRetriever(client, settings).views(toc, None)  # type: ignore[arg-type]
    assert len(views) > 1 and len(client.prompts) > len(views)  # chapters cut into windows, then 11 opened
    assert all(sum(len(line + "\n") // 3 + 1 for line in view.text.splitlines()) <= 24 for view in views)


def test_train_toc_refuses_a_toc_over_the_context_before_generating_any_question(tmp_path, monkeypatch, capsys):
    settings, flags = store_with(tmp_path, book("long-book", chapters=4, sections=4))
    monkeypatch.setattr("strata.train.toc.load_base_tokenizer", lambda *args: WordTokenizer())
    monkeypatch.setattr("strata.train.toc.make_client", NoModel("make_client"))
    monkeypatch.setattr("strata.train.toc.load_base_model", NoModel("load_base_model"))
    limits = ["--toc.context_tokens", "1024", "--toc.answer_reserve_tokens", "1000"]
    assert cli.main(["train-toc", "long-book", *flags, *limits]) == 2
    error = capsys.readouterr().err
    assert "strata: error: long-book: the ToC is" in error and "toc.context_tokens (1024)" in error
    assert "toc.answer_reserve_tokens (1000)" in error and "raise toc.context_tokens to at least" in error


class PreferringBackend:
    """A token backend of whole words whose model prefers the words of one label by 5 nats wherever it is shown."""

    end_of_answer_token = 0
    vocabulary = 256

    def __init__(self, wanted: str) -> None:
        self.words: dict[str, int] = {}
        self.wanted = self.tokenize_answer(wanted)

    def tokenize_answer(self, text: str) -> list[int]:
        return [self.words.setdefault(word, len(self.words) + 1) for word in text.split()]

    def next_token_logprobs(self, system, user, answer):
        logits = np.full(self.vocabulary, -5.0)
        logits[self.wanted] = 0.0
        return logits - np.log(np.exp(logits).sum())


def test_zero_shot_windows_are_ranked_on_one_scale_and_a_window_of_one_choice_does_not_win_by_default():
    # Leaves 1-5, 'leaf N Title' is 3 words: windows [1 2] [3 4] [5]. Renormalised over its own choices, leaf 5
    # alone scores log 1 = 0, above the preferred leaf 3 (log of its share against leaf 4, just below 0).
    builder = PaperBuilder("flat", "test")
    for title in ("Alpha", "Beta", "Target", "Delta", "Omega"):
        builder.open_section(title, 1)
        builder.add_block(f"{title} text.")
    toc = document_toc(builder.build(title="Flat"))
    settings = TocSettings(context_tokens=1024, answer_reserve_tokens=1018, top_k=2)  # 6 tokens: two lines
    retriever = TocRetriever(SimpleNamespace(backend=PreferringBackend("3 Target")), settings)  # type: ignore[arg-type]
    assert [[entry.number for entry in view.choices] for view in retriever.views(toc, None)] == [["1", "2"],
                                                                                                ["3", "4"], ["5"]]
    ranking = retriever.rank(toc, "Where is the target?")
    assert [leaf.number for leaf in ranking.leaves][0] == "3" and len(ranking.leaves) == 2
    assert ranking.leaves[0].score > ranking.leaves[1].score
    # Windows of k choices or fewer send only their winners on; the runners-up still fill the k asked for.
    three = TocSettings(context_tokens=1024, answer_reserve_tokens=1018, top_k=3)
    retriever = TocRetriever(SimpleNamespace(backend=PreferringBackend("3 Target")), three)  # type: ignore[arg-type]
    leaves = retriever.rank(toc, "Where is the target?").leaves
    assert [leaf.number for leaf in leaves][0] == "3" and len({leaf.number for leaf in leaves}) == 3
    assert [leaf.score for leaf in leaves] == sorted((leaf.score for leaf in leaves), reverse=True)


# A ToC of one leaf


def test_strata_toc_answers_a_toc_of_one_leaf_with_it_without_loading_any_model(tmp_path, monkeypatch, capsys):
    settings, flags = store_with(tmp_path, one_leaf_paper())
    monkeypatch.setattr("strata.toc.query.make_client", NoModel("make_client"))
    monkeypatch.setattr("strata.toc.query._adapter_ranking", NoModel("the adapter"))
    (settings.store.home / "toc" / "adapters" / "one-leaf" / "stair").mkdir(parents=True)  # even with an adapter
    paper = one_leaf_paper()
    answer = answer_from_toc(settings, paper, "What is said?", k=3)
    assert answer.method == "only-leaf" and [hit.path for hit in answer.hits] == [("Everything",)]
    assert answer.hits[0].text == "All there is to say, in one section." and answer.hits[0].score == 0.0
    assert cli.main(["toc", "one-leaf", "What is said?", *flags]) == 0
    out = capsys.readouterr().out
    assert "only-leaf" in out and "1. 1 Everything" in out and "All there is to say" in out


def test_a_leaf_without_text_says_so_in_the_answer(tmp_path, monkeypatch):
    settings, _ = store_with(tmp_path)
    monkeypatch.setattr("strata.toc.query.make_client", NoModel("make_client"))
    answer = answer_from_toc(settings, one_leaf_paper(text=False), "What is said?")
    assert answer.hits[0].locator is None and "(this leaf holds no text)" in format_toc_answer(answer)


def test_train_toc_refuses_a_toc_of_one_leaf_before_loading_any_model(tmp_path, monkeypatch, capsys):
    _, flags = store_with(tmp_path, one_leaf_paper())
    monkeypatch.setattr("strata.train.toc.make_client", NoModel("make_client"))
    monkeypatch.setattr("strata.train.toc.load_base_tokenizer", NoModel("load_base_tokenizer"))
    assert cli.main(["train-toc", "one-leaf", *flags]) == 2
    error = capsys.readouterr().err
    assert "strata: error: one-leaf: nothing to learn: the ToC has one leaf (1 Everything)" in error


# Leaves without text


def test_train_toc_refuses_a_document_whose_leaves_hold_no_text(tmp_path, monkeypatch, capsys):
    _, flags = store_with(tmp_path, book("empty-book", chapters=2, sections=2, text=False))
    monkeypatch.setattr("strata.train.toc.make_client", NoModel("make_client"))
    monkeypatch.setattr("strata.train.toc.load_base_tokenizer", NoModel("load_base_tokenizer"))
    assert cli.main(["train-toc", "empty-book", *flags]) == 2
    error = capsys.readouterr().err
    assert "strata: error: empty-book: none of its 4 ToC leaves holds any text" in error
    assert "synthetic training questions are written from each leaf's text" in error


def test_a_document_with_some_text_is_trainable_and_the_leaves_without_are_reported():
    builder = PaperBuilder("partly", "test")
    for title, text in (("Alpha", "Alpha has text."), ("Beta", ""), ("Gamma", "Gamma too.")):
        builder.open_section(title, 1)
        builder.add_block(text)
    logged: list[str] = []
    check_trainable(document_toc(builder.build(title="Partly")), logged.append)
    assert logged == ["partly: 1 of 3 leaves have no text; their questions come from the title"]
    check_trainable(document_toc(book("full", chapters=2, sections=2)), logged.append)
    assert len(logged) == 1


# An unknown document


@pytest.mark.parametrize("command", [["toc", "no-such-paper", "Why?"], ["train-toc", "no-such-paper"]])
def test_an_unknown_paper_id_is_a_clear_error_naming_it(tmp_path, monkeypatch, capsys, command):
    _, flags = store_with(tmp_path, one_leaf_paper())
    monkeypatch.setattr("strata.toc.query.make_client", NoModel("make_client"))
    monkeypatch.setattr("strata.train.toc.make_client", NoModel("make_client"))
    assert cli.main([*command, *flags]) == 2
    assert "strata: error: no document with id or title 'no-such-paper' in the corpus" in capsys.readouterr().err


def test_an_adapter_for_a_toc_that_changed_since_training_is_refused_before_any_model_loads(tmp_path, monkeypatch):
    from strata.toc.adapter import ADAPTER_META, AdapterMeta
    from strata.toc.tree import toc_digest

    trained, changed = book("the-book", chapters=2, sections=2), book("the-book", chapters=3, sections=2)
    settings, _ = store_with(tmp_path, changed)  # re-ingested since: a chapter more
    monkeypatch.setattr("strata.toc.adapter.load_base_model", NoModel("load_base_model"))
    folder = settings.store.home / "toc" / "adapters" / "the-book" / "stair"
    folder.mkdir(parents=True)
    meta = AdapterMeta(mode="stair", base_model="base", paper_ids=["the-book"], lora_r=8, lora_alpha=16,
                       tocs={"the-book": toc_digest(document_toc(trained))})  # fmt: skip
    (folder / ADAPTER_META).write_text(meta.model_dump_json())
    with pytest.raises(ValueError, match="the-book's ToC changed since this adapter was trained"):
        answer_from_toc(settings, changed, "What is topic 3 1 about?", k=3)
    meta.tocs["the-book"] = toc_digest(document_toc(changed))  # the same ToC: it goes on to load the model
    (folder / ADAPTER_META).write_text(meta.model_dump_json())
    with pytest.raises(AssertionError, match="load_base_model"):
        answer_from_toc(settings, changed, "What is topic 3 1 about?", k=3)


def test_a_fusion_weight_chosen_under_other_leaf_search_settings_is_not_applied(tmp_path, monkeypatch):
    from strata.rerank.fusion import FusionChoice
    from strata.toc.adapter import ADAPTER_META, AdapterMeta
    from strata.toc.query import fusion_context
    from strata.toc.tree import toc_digest

    paper = book("the-book", chapters=2, sections=2)
    settings, _ = store_with(tmp_path, paper)
    settings = settings.model_copy(update={"index": settings.index.model_copy(update={"dense": False})})
    monkeypatch.setattr("strata.toc.adapter.load_base_model", NoModel("load_base_model"))
    folder = settings.store.home / "toc" / "adapters" / "the-book" / "stair"
    folder.mkdir(parents=True)
    chosen = FusionChoice(weight=0.3, metric="R@1", queries=20, curve={"0": 0.5, "0.3": 0.7})
    trained_with = fusion_context(settings) | {"toc.fusion_candidates": 30}  # trained fusing 30 candidates
    meta = AdapterMeta(mode="stair", base_model="base", paper_ids=["the-book"], lora_r=8, lora_alpha=16,
                       tocs={"the-book": toc_digest(document_toc(paper))}, fusion=chosen, fused_with=trained_with)
    (folder / ADAPTER_META).write_text(meta.model_dump_json())
    answer = answer_from_toc(settings, paper, "What is subject number 21 about?", k=3)  # it fuses 10: leaf search
    assert answer.method == "bm25" and answer.hits and answer.hits[0].path == ("Chapter 2", "Topic 2 1")
