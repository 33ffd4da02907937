"""Training queries from the corpus itself (titles, inverse cloze), split by paper, and one whole training run of the
cross-encoder on a small corpus: validated, its fusion weight chosen and picked up by the reranker factory."""

from __future__ import annotations

import random

import numpy as np
import pytest

from corpus_support import bm25_corpus
from strata.config import Settings
from strata.documents.model import Candidate, Ranking
from strata.llm import LLMOutputError
from strata.rerank import FirstStage, make_reranker
from strata.rerank.crossencoder import FUSION_FILE, CrossEncoderReranker, trained_model_dir
from strata.rerank.fusion import FusedReranker, FusionChoice
from strata.rerank.texts import PaperTexts, window_starts
from strata.train.cross_encoder import train_cross_encoder
from strata.train.pairs import (
    SyntheticQuery,
    TrainingQuery,
    corpus_queries,
    inverse_cloze_queries,
    mined_pairs,
    passage_of,
    section_queries,
    split_by_paper,
    title_query,
    writes_queries,
    written_validation,
)

TOPICS = ["zinc", "tides", "glaciers", "neurons", "vaccines", "lasers", "bees", "coral", "soil", "comets"]


def papers(count: int) -> dict[str, tuple[str, str]]:
    """Papers on ten topics, each body several sentences long about its topic."""
    made = {}
    for number in range(count):
        topic = TOPICS[number % len(TOPICS)]
        sentences = [f"We measured {topic} samples in study {number} across {3 + s} sites in the field." for s in
                     range(4)]
        made[f"p{number:03d}"] = (f"The effect of {topic} on outcome {number} in a cohort", " ".join(sentences))
    return made


def test_title_and_inverse_cloze_queries_leave_what_they_ask_out_of_the_positive(tmp_path):
    with bm25_corpus(tmp_path, papers(3)) as (_, corpus):
        texts = PaperTexts(corpus.store)
        title = title_query(texts, "p001", 120)
        assert title is not None and title.query == "The effect of tides on outcome 1 in a cohort"
        assert title.query not in title.positive and title.positive.startswith("We measured tides")
        clozes = inverse_cloze_queries(texts, "p001", 120, random.Random(0), count=3)
        assert len({cloze.query for cloze in clozes}) == 3 and {c.source for c in clozes} == {"inverse-cloze"}
        for cloze in clozes:
            assert cloze.query in texts.passage("p001", 120) and cloze.query not in cloze.positive
            assert cloze.positive.startswith("The effect of tides")  # the reranker's title + body view
        kept = inverse_cloze_queries(texts, "p001", 120, random.Random(0), count=2, keep=1.0)
        assert all(cloze.query in cloze.positive for cloze in kept)  # left in, as a claim's words are in its abstract
        settings = Settings.load(overrides={"rerank.train_queries_per_source": 2}).rerank
        made = corpus_queries(texts, corpus.store.paper_ids(), settings)
        assert len(made) == 6 and [q.source for q in made].count("inverse-cloze") == 4  # 2 per paper by default


def test_a_section_heading_with_the_paper_title_finds_that_sections_text_and_negatives_hide_titles_too(tmp_path):
    from strata.documents.builder import PaperBuilder

    methods = " ".join(f"We cultured cells in medium {n} at 37 degrees for two days." for n in range(4))
    results = " ".join(f"Growth rose by {n} percent in the treated flasks." for n in range(5))
    with bm25_corpus(tmp_path, papers(3)) as (_, corpus):
        builder = PaperBuilder("sec", "test")
        for heading, prose in (("Methods", methods), ("Results", results)):
            builder.open_section(heading, level=1, page=1)
            builder.add_block(prose, page=1)
        corpus.store.put_paper(builder.build(title="Cell growth in flasks"), "sha-sec")
        corpus.index.sync()
        texts = PaperTexts(corpus.store)
        made = section_queries(texts, "sec", 120)
        assert [(q.query, q.source) for q in made] == [("Cell growth in flasks: Methods", "section"),
                                                       ("Cell growth in flasks: Results", "section")]
        assert made[0].positive.startswith("We cultured cells") and "Growth rose" not in made[0].positive
        assert section_queries(texts, "p001", 120) == []  # one section: nothing to tell apart

        class Hits:  # the other papers, as a first stage would rank them
            def search(self, query, k=None, method="hybrid", prf=None, paper_ids=None):
                return corpus.searcher.search("measured samples", k=k, method="bm25")

        settings = Settings.load(overrides={"rerank.train_negatives": 2}).rerank
        pairs, _ = mined_pairs(made[:1], Hits(), texts, settings, similarity=None)
        assert [p.label for p in pairs] == [1.0, 0.0, 0.0]
        assert all(p.passage.startswith("We ") for p in pairs)  # no title on either side: no shortcut
        other = PaperBuilder("other", "test")
        for heading, prose in (("Introduction", "Beakers are common. " * 12),
                               ("Methods", "Cells grew in media. " * 12)):  # fmt: skip
            other.open_section(heading, level=1, page=1)
            other.add_block(prose, page=1)
        corpus.store.put_paper(other.build(title="Another study"), "sha-other")
        negative = passage_of(texts, "section", "other", 120, query="Cell growth in flasks: Methods")
        assert negative.startswith("Cells grew in media")  # the other paper's Methods, not its opening words


def test_the_validation_split_holds_out_whole_papers():
    queries = [TrainingQuery(query=f"q{n}{s}", paper_id=f"p{n}", positive="x", source=s)
               for n in range(20) for s in ("title", "inverse-cloze")]
    train, held = split_by_paper(queries, 0.25, seed=0)
    assert len(held) == 10 and len(train) == 30
    assert not {q.paper_id for q in train} & {q.paper_id for q in held}


class Writer:
    """A client that writes a numbered query for each passage (or fails every time)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.passages: list[str] = []

    def complete(self, prompt, schema, max_tokens=None):
        if self.fail:
            raise LLMOutputError(prompt.name, "{", "not JSON")
        self.passages.append(prompt.user)
        return SyntheticQuery(query=f"written {len(self.passages)}")


class Passages:
    def passage(self, paper_id: str, words: int) -> str:
        return f"passage of {paper_id}"


def test_only_written_queries_of_held_out_papers_validate_when_an_llm_can_write_them():
    """Title and inverse-cloze queries repeat indexed text word for word (the first stage solves them); with an LLM,
    held-out papers are validated by queries it wrote: those written for training, then one for each other paper."""
    held = [TrainingQuery(query="Zinc title", paper_id="p1", positive="x", source="title"),
            TrainingQuery(query="a zinc sentence", paper_id="p1", positive="x", source="inverse-cloze"),
            TrainingQuery(query="does zinc work", paper_id="p2", positive="x", source="llm"),
            TrainingQuery(query="Tides title", paper_id="p3", positive="x", source="title")]
    settings = Settings.load(overrides={"rerank.train_validation_written": 3}).rerank
    writer = Writer()
    validation, failed = written_validation(held, Passages(), settings, writer)
    assert failed == 0 and {q.source for q in validation} == {"llm"}
    assert [(q.paper_id, q.query) for q in validation] == [("p2", "does zinc work"), ("p1", "written 1"),
                                                           ("p3", "written 2")]
    assert validation[1].positive == "passage of p1"
    capped, _ = written_validation(held, Passages(), settings.model_copy(update={"train_validation_written": 2}),
                                   Writer())
    assert len(capped) == 2 and capped[0].query == "does zinc work"
    assert written_validation(held, Passages(), settings, None) == (held, 0)  # no LLM: the held-out queries
    off = settings.model_copy(update={"train_validation_written": 0})
    assert written_validation(held, Passages(), off, writer) == (held, 0)
    assert writes_queries(off.model_copy(update={"train_passages": 0})) is False  # the LLM is not even loaded
    assert writes_queries(settings.model_copy(update={"train_passages": 0})) is True
    unwritable = [query for query in held if query.source != "llm"]
    assert written_validation(unwritable, Passages(), settings, Writer(fail=True)) == (unwritable, 2)


def test_a_corpus_too_small_to_train_on_gets_a_clear_message(tmp_path):
    with bm25_corpus(tmp_path, papers(5)) as (_, corpus), pytest.raises(ValueError, match="at least 50"):
        train_cross_encoder(corpus, None)


@pytest.mark.slow
def test_a_training_run_validates_and_the_factory_fuses_at_the_chosen_weight(tmp_path):
    overrides = {"rerank.train_queries_per_source": 60, "rerank.train_validation_share": 0.2,
                 "rerank.train_epochs": 2, "rerank.cross_encoder_depth": 10, "rerank.train_max_length": 64}
    with bm25_corpus(tmp_path, papers(60)) as (base, _):
        pass
    settings = Settings.load(overrides={"store.home": str(base.store.home), "index.dense": False, **overrides})
    from strata.corpus import Corpus

    with Corpus.open(settings) as corpus:
        lines: list[str] = []
        report = train_cross_encoder(corpus, None, log=lines.append)
        assert report.queries == {"title": 48, "inverse-cloze": 96}  # two sentences a paper
        assert report.validation_queries == {"title": 12, "inverse-cloze": 24}
        assert report.pairs["title"] == 4 * 48 and 1 <= len(report.epochs) <= 2
        assert 0.0 < report.first_stage_validation <= 1.0 and any("validation nDCG@10" in line for line in lines)
        chosen = FusionChoice.model_validate_json((trained_model_dir(settings) / FUSION_FILE).read_text())
        assert chosen == report.fusion and set(chosen.curve) >= {"0", "1"}
        assert chosen.curve[f"{chosen.weight:g}"] >= chosen.curve["0"]  # never below the first stage on validation
        reranker = make_reranker(settings, corpus.store, method="cross-encoder")
        # weight 0: validation kept the first stage, and the model is not even loaded
        expected = {0.0: FirstStage, 1.0: CrossEncoderReranker}.get(chosen.weight, FusedReranker)
        assert isinstance(reranker, expected)
        ranking = reranker.rank("zinc samples", corpus.searcher.search("zinc samples", k=10))
        assert len(ranking.candidates) == 10


def test_windows_cover_the_whole_body_back_to_back_the_last_one_full():
    assert window_starts(200, 80, 4) == [0, 80, 120]
    assert window_starts(160, 80, 4) == [0, 80]
    assert window_starts(50, 80, 4) == [0]
    assert window_starts(1000, 80, 3) == [0, 80, 160]  # a long text: its first windows only
    assert window_starts(200, 80, 1) == [0]


def late_evidence_papers() -> dict[str, tuple[str, str]]:
    """Two papers whose opening words are alike; only the end of p000's body says what zinc does to colds."""
    filler = " ".join(f"Background sentence {n} describes the cohort design." for n in range(12))
    return {
        "p000": ("A cohort study", f"{filler} Zinc lozenges shortened common colds by two days."),
        "p001": ("A cohort study", f"{filler} Vitamin D had no effect on fractures."),
    }


def test_a_paper_shows_training_the_window_nearest_the_query_and_cloze_positives_keep_their_context(tmp_path):
    with bm25_corpus(tmp_path, late_evidence_papers()) as (_, corpus):
        texts = PaperTexts(corpus.store)
        windows = texts.windows("p000", 30, 4)
        assert len(windows) == 4 and windows[0] == texts.passage("p000", 30) and windows[-1].endswith("two days.")
        assert all(window.startswith("A cohort study. ") for window in windows)
        query = "do zinc lozenges shorten colds"
        nearest = passage_of(texts, "labelled", "p000", 30, query, windows=4)
        assert nearest == windows[2] and "Zinc lozenges" in nearest  # the first of the two windows that say it
        assert passage_of(texts, "labelled", "p000", 30, query) == windows[0]  # one window: the opening words
        rng = random.Random(0)
        clozes = inverse_cloze_queries(texts, "p000", 30, rng, count=13, keep=0.0, windows=4)
        last = next(cloze for cloze in clozes if cloze.query.startswith("Zinc lozenges"))
        assert "Zinc" not in last.positive and "Background sentence 11" in last.positive  # where the sentence stood


def test_inverse_cloze_draws_its_sentences_from_the_windows_the_cross_encoder_reads(tmp_path):
    with bm25_corpus(tmp_path, late_evidence_papers()) as (_, corpus):
        texts = PaperTexts(corpus.store)
        read = " ".join(texts.body("p000")[:30])  # one window: sentences 0-3 of the filler (seven words each)
        clozes = inverse_cloze_queries(texts, "p000", 30, random.Random(0), count=13, windows=1)
        assert len(clozes) == 4 and all(cloze.query in read for cloze in clozes)
        assert all(len(cloze.positive.split()) == 3 + 30 for cloze in clozes)  # title + a full window still


class KeywordModel:
    """A stand-in cross-encoder: a pair scores 1 when its passage mentions zinc, else 0."""

    def predict(self, pairs, batch_size=32):
        return np.array([float("zinc" in passage.lower()) for _, passage in pairs])


def test_the_cross_encoder_scores_a_paper_by_its_best_window(tmp_path):
    with bm25_corpus(tmp_path, late_evidence_papers()) as (_, corpus):
        texts = PaperTexts(corpus.store)
        first = Ranking(query="zinc", method="hybrid", candidates=[
            Candidate(paper_id="p001", score=2.0, rank=1), Candidate(paper_id="p000", score=1.0, rank=2)])
        opening_only = CrossEncoderReranker(KeywordModel(), texts, depth=10, passage_words=30, batch=8, windows=1)
        assert opening_only.rank("zinc", first).paper_ids == ["p001", "p000"]  # a tie: the first-stage order
        maxp = CrossEncoderReranker(KeywordModel(), texts, depth=10, passage_words=30, batch=8, windows=4)
        assert maxp.rank("zinc", first).paper_ids == ["p000", "p001"]
