"""`strata tune-reranker`: an LLM reranker's fusion weight chosen on LLM-written queries of sampled papers, saved under
the store and used by search; a reranker that does not help gets weight 0 and search then keeps the first-stage order
without asking the LLM. A fake LLM writes the queries and judges relevance; the corpus is BM25-only (no model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from corpus_support import bm25_corpus
from test_rerank_cli import run_json, use_backend

from strata.cli import main
from strata.config import LLMSettings, Settings
from strata.llm import ContinuationScore, Generation, LLMClient, Scoring
from strata.rerank import FirstStage, make_reranker
from strata.rerank.fusion import TunedFusion, tuned_fusion_file
from strata.rerank.pointwise import PointwiseReranker
from strata.store.sqlite import CorpusStore

# Identical wording in every paper, so BM25 ties them all and the first stage can only guess (ties: id order).
PAPERS = {f"p{n:02d}": (f"Zinc lozenge trial {n}", "Zinc lozenges shortened colds in adults.") for n in range(60)}
TRIAL = re.compile(r"trial (\d+)")


def code(number: str) -> str:
    """A word naming a paper that no paper holds: the first stage cannot find it, the fake judge can."""
    return "zq" + "".join(chr(ord("a") + int(digit)) for digit in number)


class JudgeBackend:
    """Writes the query 'zinc colds [trial N] <code of N>' for the passage of trial N; says yes to a document
    exactly when it is the query's own paper (`helpful`) or exactly when it is not (a harmful reranker)."""

    name = "fake"
    model = "fake-1"
    load_seconds = None

    def __init__(self, helpful: bool) -> None:
        self.helpful = helpful
        self.judged = 0

    def generate(self, system, user, schema, options) -> Generation:
        number = TRIAL.search(user).group(1)
        named = f" trial {number}" if int(number) % 2 == 0 else ""  # the first stage finds even trials' papers
        query = f"zinc colds{named} {code(number)}"
        return Generation(text=json.dumps({"query": query}), tokens_in=len(user) // 4, tokens_out=8)

    def score(self, system: str, user: str, continuations) -> Scoring:
        self.judged += 1
        document, query = user.split("Query:", 1)
        own = code(TRIAL.search(document).group(1)) in query.split()
        yes = own == self.helpful
        scores = [ContinuationScore(continuation=c, n_tokens=1,
                                    logprob=(-0.1 if yes else -3.0) if c.lower() == "yes" else (-3.0 if yes else -0.1))
                  for c in continuations]  # fmt: skip
        return Scoring(scores=scores, tokens_in=len(user) // 4)

    def close(self) -> None:
        pass


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    with bm25_corpus(tmp_path, PAPERS) as (settings, _):
        return settings.store.home


# 16 queries: the 8 the reranker alone fixes are evidence enough (paired p < search.fusion_max_p); 4 of 8 would not be
FLAGS = ["--index.dense", "false", "--rerank.train_validation_written", "16", "--rerank.pointwise_depth", "60"]


def tuned(home: Path, monkeypatch, capsys, helpful: bool) -> tuple[dict, JudgeBackend]:
    backend = JudgeBackend(helpful)
    use_backend(monkeypatch, backend)
    report = run_json(capsys, "tune-reranker", "--method", "pointwise", "--store.home", str(home), *FLAGS, "--json")
    return report, backend


def pointwise(home: Path, model: str, client: LLMClient, depth: int = 60, **rerank: object):
    settings = Settings.load(overrides={"store.home": str(home), "index.dense": False, "llm.model": model,
                                        "rerank.method": "pointwise", "rerank.pointwise_depth": depth,
                                        **{f"rerank.{name}": value for name, value in rerank.items()}})  # fmt: skip
    return make_reranker(settings, CorpusStore(home / "corpus.sqlite3"), client)


def test_a_reranker_that_helps_on_written_queries_is_fused_at_the_weight_chosen_there(home, monkeypatch, capsys):
    report, backend = tuned(home, monkeypatch, capsys, helpful=True)
    fusion = report["fusion"]
    assert report["written_queries"] == fusion["queries"] == 16 and report["failed_queries"] == 0
    assert report["reranker_validation"] == 1.0 > fusion["curve"]["0"]  # the judge finds each query's own paper
    assert fusion["weight"] > 0 and fusion["curve"][f"{fusion['weight']:g}"] == 1.0 and fusion["p_value"] < 0.05
    assert backend.judged == 16 * 60  # every candidate of every validation query judged once
    saved = TunedFusion.model_validate_json(tuned_fusion_file(Settings.load(overrides={"store.home": str(home)}),
                                                              "pointwise").read_text())  # fmt: skip
    assert saved.fusion.weight == fusion["weight"] and saved.model == Settings().llm.model
    assert "fused at weight" in saved.summary()


def test_a_reranker_that_does_not_help_gets_weight_zero_and_search_keeps_the_first_stage(home, monkeypatch, capsys):
    report, _ = tuned(home, monkeypatch, capsys, helpful=False)
    assert report["fusion"]["weight"] == 0 and report["reranker_validation"] < report["fusion"]["curve"]["0"]
    backend = JudgeBackend(helpful=False)
    use_backend(monkeypatch, backend)
    assert main(["search", "zinc colds", "--store.home", str(home), *FLAGS[:2], *FLAGS[4:],
                 "--rerank.method", "pointwise"]) == 0  # fmt: skip
    assert backend.judged == 0  # weight 0: the LLM is not even asked
    shown = capsys.readouterr().out
    assert 0 <= shown.index("Zinc lozenge trial 0") < shown.index("Zinc lozenge trial 1")  # first-stage order


def test_a_weight_chosen_for_one_model_or_depth_is_not_applied_to_another(home, monkeypatch, capsys):
    tuned(home, monkeypatch, capsys, helpful=False)
    client = LLMClient(JudgeBackend(helpful=False), LLMSettings())
    assert isinstance(pointwise(home, Settings().llm.model, client), FirstStage)  # tuned: weight 0
    other = pointwise(home, "packaged:qwen2.5-coder-1.5b", client)
    assert isinstance(other, PointwiseReranker)  # never tuned on that model: the reranker alone, as configured
    shallower = pointwise(home, Settings().llm.model, client, depth=20)
    assert isinstance(shallower, PointwiseReranker)  # tuned at depth 60, another reranker at 20: alone too
    shorter = pointwise(home, Settings().llm.model, client, window_tokens=1024)
    assert isinstance(shorter, PointwiseReranker)  # another prompt budget: another reranker


def test_a_corpus_too_small_to_measure_on_gets_a_clear_error(tmp_path, monkeypatch, capsys):
    with bm25_corpus(tmp_path, dict(list(PAPERS.items())[:5])) as (settings, _):
        home = settings.store.home
    use_backend(monkeypatch, JudgeBackend(helpful=True))
    assert main(["tune-reranker", "--method", "pointwise", "--store.home", str(home), *FLAGS]) != 0
    error = capsys.readouterr().err
    assert "5 papers" in error and "too few to measure a reranker on" in error
    assert not tuned_fusion_file(Settings.load(overrides={"store.home": str(home)}), "pointwise").exists()
