"""Fusion with the first stage: weight 0 is the first stage, 1 the reranker, a validation split picks between."""

from __future__ import annotations

import pytest

from strata.config import Settings
from strata.documents.model import Candidate, Ranking
from strata.rerank.crossencoder import FUSION_FILE, trained_fusion
from strata.rerank.fusion import (
    FusedReranker,
    FusionChoice,
    choose_fusion,
    choose_weight,
    fuse,
    fuse_scores,
    min_max,
)


def ranking(ids: list[str], query: str = "q") -> Ranking:
    return Ranking(query=query, method="hybrid",
                   candidates=[Candidate(paper_id=pid, score=1.0 / r, rank=r) for r, pid in enumerate(ids, 1)])


class Reverse:
    name = "reverse"

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        return ranking(list(reversed(candidates.paper_ids)), query)


def test_the_ends_of_the_weight_are_the_first_stage_and_the_reranker():
    first, reranked = ranking(["a", "b", "c", "d"]), ranking(["d", "c", "b", "a"])
    assert fuse(first, reranked, 0.0) == ["a", "b", "c", "d"]
    assert fuse(first, reranked, 1.0) == ["d", "c", "b", "a"]
    # Halfway every paper's two contributions sum to nearly the same: ties keep the first-stage order.
    assert fuse(first, ranking(["b", "a", "c", "d"]), 0.5) == ["a", "b", "c", "d"]


def test_a_paper_the_reranker_left_out_counts_at_its_last_rank():
    assert fuse(ranking(["a", "b", "c"]), ranking(["c", "b"]), 1.0) == ["c", "b", "a"]


def test_the_fused_reranker_keeps_every_candidate_and_names_itself():
    fused = FusedReranker(Reverse(), 0.9).rank("q", ranking(["a", "b", "c"]))
    assert fused.paper_ids == ["c", "b", "a"] and fused.method == "hybrid>reverse+fusion(0.9)"
    assert [c.rank for c in fused.candidates] == [1, 2, 3]
    assert FusedReranker(Reverse(), 0.0).rank("q", ranking(["a", "b"])).paper_ids == ["a", "b"]
    with pytest.raises(ValueError, match="within"):
        FusedReranker(Reverse(), 1.5)


def reciprocal_rank(gold: dict[str, str]):
    def score(runs) -> dict[str, float]:
        return {qid: 1 / (runs[qid].index(gold[qid]) + 1) for qid in runs}

    return score


def test_validation_gives_weight_zero_to_a_reranker_that_hurts_and_one_to_one_that_helps():
    gold = {"q1": "a", "q2": "b"}
    mrr = reciprocal_rank(gold)
    first = {"q1": ranking(["a", "b", "c"]), "q2": ranking(["b", "a", "c"])}
    hurting = {qid: Reverse().rank(qid, r) for qid, r in first.items()}
    choice = choose_weight(first, hurting, mrr, "MRR")
    assert choice.weight == 0.0 and choice.gain == 0.0 and set(choice.curve) == {f"{w / 10:g}" for w in range(11)}
    assert choice.best_weight == 0.0 and choice.p_value is None and "does not beat" in choice.verdict()
    helping_first = {"q1": ranking(["c", "b", "a"]), "q2": ranking(["c", "a", "b"])}
    helping = {qid: Reverse().rank(qid, r) for qid, r in helping_first.items()}
    choice = choose_weight(helping_first, helping, mrr, "MRR")
    assert choice.weight > 0.5 and choice.gain > 0 and choice.curve["0"] == pytest.approx((1 / 3 + 1 / 3) / 2)


def test_a_gain_on_too_few_validation_queries_keeps_the_first_stage():
    # Two queries that both gain: the smallest two-sided sign-flip p-value of two queries is 0.5.
    gold = {"q1": "a", "q2": "b"}
    helping_first = {"q1": ranking(["c", "b", "a"]), "q2": ranking(["c", "a", "b"])}
    helping = {qid: Reverse().rank(qid, r) for qid, r in helping_first.items()}
    choice = choose_weight(helping_first, helping, reciprocal_rank(gold), "MRR", max_p=0.05)
    assert choice.weight == 0.0 and choice.gain == 0.0
    assert choice.best_weight and choice.best_weight > 0.5 and choice.p_value == pytest.approx(0.5, abs=0.05)
    assert "too little evidence" in choice.verdict()
    # Twenty queries that all gain are evidence enough.
    many_gold = {f"q{n}": "a" for n in range(20)}
    many_first = {qid: ranking(["c", "b", "a"]) for qid in many_gold}
    many = {qid: Reverse().rank(qid, r) for qid, r in many_first.items()}
    choice = choose_weight(many_first, many, reciprocal_rank(many_gold), "MRR", max_p=0.05)
    assert choice.weight == choice.best_weight and choice.weight > 0.5 and choice.p_value < 0.001
    assert choice.verdict().startswith(f"ranks fused at weight {choice.weight:g}")


def test_the_factory_fuses_any_reranker_and_weight_zero_builds_none():
    from strata.config import LLMSettings
    from strata.llm import LLMClient
    from strata.rerank import FirstStage, make_reranker
    from strata.rerank.rerankers import ListwiseReranker
    from test_rerank_unit import RankingBackend

    def settings(weight):
        return Settings.load(overrides={} if weight is None else {"rerank.fusion_weight": weight})

    client = LLMClient(RankingBackend(), LLMSettings())
    # Weight 0 needs no reranker at all: no LLM client asked for, no model loaded.
    assert isinstance(make_reranker(settings(0.0), store=None, method="listwise"), FirstStage)
    fused = make_reranker(settings(0.4), store=None, client=client, method="listwise")
    assert isinstance(fused, FusedReranker) and fused.weight == 0.4 and isinstance(fused.inner, ListwiseReranker)
    assert isinstance(make_reranker(settings(None), store=None, client=client, method="listwise"), ListwiseReranker)
    assert isinstance(make_reranker(settings(0.4), store=None, method="first-stage"), FirstStage)


def test_a_trained_cross_encoder_brings_its_weight_and_a_configured_one_is_unfused(tmp_path):
    model = tmp_path / "ce"
    model.mkdir()
    (model / "config.json").write_text("{}")
    settings = Settings.load(overrides={"rerank.cross_encoder_dir": str(model)})
    assert trained_fusion(settings) is None  # trained before fusion existed: the reranker runs alone
    old = '{"weight": 0.3, "metric": "nDCG@10", "queries": 50, "curve": {"0": 0.5, "0.3": 0.6}}'
    (model / FUSION_FILE).write_text(old)  # written before fusion had modes: ranks
    assert trained_fusion(settings) == FusionChoice(weight=0.3, mode="rank", metric="nDCG@10", queries=50,
                                                    curve={"0": 0.5, "0.3": 0.6})
    (model / FUSION_FILE).write_text(FusionChoice.model_validate_json(old).model_copy(
        update={"mode": "score"}).model_dump_json())
    assert trained_fusion(settings).mode == "score"
    configured = Settings.load(overrides={"rerank.cross_encoder_dir": str(model),
                                          "rerank.cross_encoder_model": str(model)})
    assert trained_fusion(configured) is None


def test_a_cross_encoder_whose_validation_kept_the_first_stage_is_never_loaded(tmp_path):
    from strata.rerank import FirstStage, make_reranker

    model = tmp_path / "ce"
    model.mkdir()
    (model / "config.json").write_text("{}")  # no weights: loading it would fail
    kept = FusionChoice(weight=0.0, metric="nDCG@10", queries=50, curve={"0": 0.6, "0.3": 0.61})
    (model / FUSION_FILE).write_text(kept.model_dump_json())
    settings = Settings.load(overrides={"rerank.cross_encoder_dir": str(model)})
    assert isinstance(make_reranker(settings, store=None, method="cross-encoder"), FirstStage)


class Scores:
    """A scoring reranker with fixed scores for the top of the candidates."""

    name = "scores"

    def __init__(self, scores: dict[str, float]) -> None:
        self.fixed = scores

    def scores(self, query: str, candidates: Ranking) -> dict[str, float]:
        return {pid: score for pid, score in self.fixed.items() if pid in candidates.paper_ids}

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        order = fuse_scores(candidates, self.scores(query, candidates), 1.0)
        return ranking(order, query)


def test_score_fusion_keeps_the_margins_that_rank_fusion_throws_away():
    first = ranking(["a", "b", "c", "d"])  # first-stage scores 1, 1/2, 1/3, 1/4
    # The reranker barely prefers b over a, but is sure c is bad: rank fusion halfway ties a and b, scores do not.
    sure = {"a": 4.9, "b": 5.0, "c": -10.0}
    assert fuse_scores(first, sure, 0.0) == ["a", "b", "c", "d"]  # weight 0: the first stage
    assert fuse_scores(first, sure, 1.0) == ["b", "a", "c", "d"]  # weight 1: the reranker; d, unscored, stays last
    assert fuse_scores(first, sure, 0.5) == ["a", "b", "c", "d"]  # a's first-stage lead outweighs a 0.1 logit
    assert fuse_scores(first, {"a": 1.0, "b": 1.0}, 1.0)[:2] == ["a", "b"]  # equal scores: first-stage order
    assert fuse_scores(first, {}, 0.5) == ["a", "b", "c", "d"]
    fused = FusedReranker(Scores(sure), 1.0, mode="score").rank("q", first)
    assert fused.paper_ids == ["b", "a", "c", "d"] and fused.method == "hybrid>scores+score-fusion(1)"
    with pytest.raises(ValueError, match="gives no scores"):
        FusedReranker(Reverse(), 0.5, mode="score")


def test_a_non_finite_model_score_spoils_neither_the_others_nor_their_order():
    # inf - inf and inf / inf are NaN, and NaN compares false, so one such score left every normalised score NaN or 0
    # (the reranker's order lost: c, scored 2, stayed third) or sorted the head arbitrarily.
    nan, inf = float("nan"), float("inf")
    # +inf above every finite score, -inf and NaN below, each by the finite scores' range
    assert min_max([nan, 1.0, 3.0, inf, -inf]) == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0, 0.0])
    assert min_max([2.0, inf]) == [0.0, 1.0] and min_max([nan]) == [0.0] and min_max([1.0, 2.0]) == [0.0, 1.0]
    first = ranking(["a", "b", "c", "d"])
    assert fuse_scores(first, {"a": 1.0, "b": nan, "c": 2.0}, 1.0) == ["c", "a", "b", "d"]
    assert fuse_scores(first, {"a": 1.0, "b": inf, "c": 2.0}, 1.0) == ["b", "c", "a", "d"]
    assert fuse_scores(first, {"a": -inf, "b": 1.0, "c": 2.0}, 1.0) == ["c", "b", "a", "d"]


def test_validation_chooses_score_fusion_when_the_margins_carry_the_answer():
    # Twenty queries, each preferring b over a in the reranker: by a hair where the first stage is right (gold a),
    # by a wide margin where it is wrong (gold b). Ranks cannot tell the two apart; fused scores take only the sure
    # calls.
    gold = {f"q{n}": "b" if n % 2 else "a" for n in range(20)}
    first = {qid: ranking(["a", "b", "c"]) for qid in gold}
    scores = {qid: {"a": 0.0, "b": 10.0, "c": -1.0} if gold[qid] == "b" else {"a": 4.9, "b": 5.0, "c": -10.0}
              for qid in gold}
    choice = choose_fusion(first, scores, reciprocal_rank(gold), "MRR", max_p=0.05)
    assert choice.mode == "score" and 0.4 < choice.weight < 1 and choice.gain == pytest.approx(0.25)
    assert choice.verdict().startswith("scores fused")
    # A reranker that never helps: both modes choose weight 0, and ranks (the default) are kept.
    useless = {qid: {"a": 1.0, "b": 0.0, "c": 0.5} for qid in gold}
    kept = choose_fusion(first, useless, reciprocal_rank(gold), "MRR", max_p=0.05)
    assert kept.weight == 0.0 and kept.mode == "rank"
