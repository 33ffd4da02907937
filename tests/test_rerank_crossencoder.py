"""The cross-encoder path: one training step from the packaged MiniLM, saved under the store home, picked up by the
default reranker; a configured model path loads instead; training queries come from the corpus and the fake LLM,
negatives from the first stage with a false-negative filter; a whole training run validates and chooses its fusion weight."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from strata.config import LLMSettings, Settings
from strata.documents.model import Paper
from strata.llm import LLMClient
from strata.rerank import FirstStage, make_reranker
from strata.rerank.crossencoder import FUSION_FILE, CrossEncoderReranker, cross_encoder_source, trained_model_dir
from strata.rerank.fusion import FusedReranker, FusionChoice
from strata.rerank.texts import PaperTexts
from strata.store.sqlite import CorpusStore
from strata.train.cross_encoder import fit_cross_encoder, query_groups
from strata.train.pairs import TrainingPair, TrainingQuery, llm_queries, mined_pairs
from test_rerank_unit import RankingBackend, first_stage

pytestmark = pytest.mark.slow


@pytest.fixture()
def store(tmp_path: Path):
    store = CorpusStore(tmp_path / "home" / "corpus.sqlite3")
    for number in range(12):
        store.put_paper(
            Paper(id=f"p{number:03d}", title=f"Paper {number}", abstract=f"zinc trial {number}", source_format="test"),
            "sha",
        )
    yield store
    store.close()


def test_a_trained_cross_encoder_is_saved_under_the_store_and_loads_back(store: CorpusStore, tmp_path: Path):
    settings = Settings.load(overrides={"store.home": str(tmp_path / "home"), "rerank.train_epochs": 1})
    assert cross_encoder_source(settings) is None
    pairs = [
        TrainingPair(query="zinc and colds", passage="Zinc shortens colds", label=1.0),
        TrainingPair(query="zinc and colds", passage="Graph networks for tides", label=0.0),
    ]
    lines: list[str] = []
    [epoch] = fit_cross_encoder(pairs, settings, trained_model_dir(settings), log=lines.append)
    assert epoch.steps == 1 and epoch.loss > 0
    assert epoch.validation is None and lines[-1].endswith("no validation")  # not a made-up nDCG of 0
    assert not trained_model_dir(settings).with_name("cross-encoder.partial").exists()  # moved into place whole
    assert cross_encoder_source(settings) == str(tmp_path / "home" / "rerank" / "cross-encoder")
    # A model trained here is used when asked for; only a user-named one replaces the first stage by default.
    assert isinstance(make_reranker(settings, store), FirstStage)
    reranker = make_reranker(settings, store, method="cross-encoder")
    assert isinstance(reranker, CrossEncoderReranker)
    # It scores in raw logits when loaded back (the group-softmax loss leaves their level arbitrary for a sigmoid).
    assert type(reranker.model.activation_fn).__name__ == "Identity"
    result = reranker.rank("zinc trial", first_stage(12))
    assert sorted(c.paper_id for c in result.candidates) == [f"p{n:03d}" for n in range(12)]
    assert result.method == "hybrid>cross-encoder"
    torch.set_num_threads(1)  # what embedding a search query leaves behind (torch's count is process-wide)
    scores = reranker.scores("zinc trial", first_stage(12))  # its best window's logit, for the top depth
    assert torch.get_num_threads() == settings.rerank.cross_encoder_threads == 2  # it scores on its own threads
    assert len(scores) == min(12, settings.rerank.cross_encoder_depth)
    assert result.paper_ids[: len(scores)] == sorted(scores, key=lambda pid: -scores[pid])
    # The fusion validation chose is what the factory builds: here scores, at weight 0.5.
    chosen = FusionChoice(weight=0.5, mode="score", metric="nDCG@10", queries=60, curve={"0": 0.5, "0.5": 0.6})
    (trained_model_dir(settings) / FUSION_FILE).write_text(chosen.model_dump_json())
    fused = make_reranker(settings, store, method="cross-encoder")
    assert isinstance(fused, FusedReranker) and (fused.weight, fused.mode) == (0.5, "score")
    assert sorted(fused.rank("zinc trial", first_stage(12)).paper_ids) == [f"p{n:03d}" for n in range(12)]
    elsewhere = settings.model_copy(
        update={"rerank": settings.rerank.model_copy(update={"cross_encoder_model": str(tmp_path / "nowhere")})}
    )
    assert cross_encoder_source(elsewhere) == str(tmp_path / "nowhere")  # a named model wins over the trained one


def test_llm_queries_take_the_query_and_its_passage_and_negatives_come_from_the_first_stage(store: CorpusStore):
    class Searcher:
        def search(self, query, k=None, method="hybrid", prf=None, paper_ids=None):
            assert method == "hybrid"  # the ranking the reranker will reorder (rerank.train_negative_method)
            return first_stage(6)

    settings = Settings.load(overrides={"rerank.train_negatives": 2}).rerank
    texts = PaperTexts(store)
    backend = RankingBackend(scripted=['{"query": "does zinc help"}', '{"query": "zinc trial results"}'])
    queries, failed = llm_queries(texts, store.paper_ids()[:2], settings, LLMClient(backend, LLMSettings()))
    assert failed == 0 and [q.query for q in queries] == ["does zinc help", "zinc trial results"]
    pairs, dropped = mined_pairs(queries, Searcher(), texts, settings, similarity=None)
    assert dropped == 0 and len(pairs) == 6 and [p.label for p in pairs[:3]] == [1.0, 0.0, 0.0]
    assert all(pair.passage.startswith("Paper") for pair in pairs)
    own = {q.query: q.paper_id for q in queries}
    negatives = [p for p in pairs if p.label == 0.0]
    assert all(not p.passage.startswith(f"Paper {int(own[p.query][1:])}.") for p in negatives)  # never its own


def test_the_false_negative_filter_drops_negatives_scored_above_the_positive(store: CorpusStore):
    class Searcher:
        def search(self, query, k=None, method="hybrid", prf=None, paper_ids=None):
            return first_stage(4)  # p000 .. p003

    def similarity(texts, papers):  # p001 looks closer to the query than the positive p000 does
        return [np.array([0.5 if pid in ("p000",) else 0.9 if pid == "p001" else 0.1 for pid in ids])
                for ids in papers]

    query = TrainingQuery(query="zinc", paper_id="p000", positive="Paper 0. zinc trial 0", source="llm")
    settings = Settings.load(overrides={"rerank.train_negatives": 3}).rerank
    pairs, dropped = mined_pairs([query], Searcher(), PaperTexts(store), settings, similarity)
    assert dropped == 1 and {p.passage for p in pairs[1:]} == {"Paper 2. zinc trial 2", "Paper 3. zinc trial 3"}
    # Held-out validation papers are never training negatives either.
    pairs, _ = mined_pairs([query], Searcher(), PaperTexts(store), settings, None, exclude={"p002"})
    assert {p.passage for p in pairs[1:]} == {"Paper 1. zinc trial 1", "Paper 3. zinc trial 3"}


def test_training_groups_each_positive_with_the_negatives_mined_for_its_query():
    pair = lambda query, passage, label: TrainingPair(query=query, passage=passage, label=label)  # noqa: E731
    pairs = [pair("q1", "a", 1.0), pair("q1", "b", 0.0), pair("q1", "c", 0.0),
             pair("q2", "d", 1.0),  # no negative mined: nothing to contrast, left out
             pair("q1", "e", 1.0), pair("q1", "f", 0.0)]  # the same words from another passage: its own group
    groups = query_groups(pairs)
    assert [[p.passage for p in group] for group in groups] == [["a", "b", "c"], ["e", "f"]]



def test_an_install_after_one_cut_between_its_renames_never_deletes_the_only_model(tmp_path: Path):
    from strata.train.cross_encoder import install

    output, old = tmp_path / "ce", tmp_path / "ce.old"
    old.mkdir()
    (old / "config.json").write_text("the only model")  # a crash left it renamed away, with no new one in place
    with pytest.raises(FileNotFoundError):
        install(tmp_path / "missing", output)  # this install fails too, at its last rename
    survivors = [folder / "config.json" for folder in (output, old) if (folder / "config.json").is_file()]
    assert [path.read_text() for path in survivors] == ["the only model"]
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "config.json").write_text("new")
    install(staged, output)
    assert (output / "config.json").read_text() == "new" and not old.exists()
