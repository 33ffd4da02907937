"""Trie-constrained ToC retrieval on the embedded llama.cpp backend with the tiny SmolLM2 model: answers are
always real leaves, also when a ToC has to be collapsed to fit; the backend's next-token log-probabilities agree
with `score()` and do not depend on what the KV cache held before."""

from __future__ import annotations

import numpy as np
import pytest

from strata.config import LLMSettings, TocSettings
from strata.documents.model import Paper, Section
from strata.llm import Prompt, make_client
from strata.toc.retriever import TocRetriever
from strata.toc.tree import document_toc

TOPICS = {
    "Sleep": ["Stages of Sleep", "Dreams", "Insomnia"],
    "Memory": ["Encoding", "Forgetting", "Amnesia"],
    "Learning": ["Classical Conditioning", "Operant Conditioning", "Observational Learning"],
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = LLMSettings(
        model="packaged:smollm2-135m", model_dir=tmp_path_factory.mktemp("models"), cache=False, n_ctx=2048
    )
    with make_client(settings) as client:
        yield client


@pytest.fixture(scope="module")
def toc():
    sections = [
        Section(
            title=chapter,
            level=1,
            path=(chapter,),
            children=[Section(title=title, level=2, path=(chapter, title)) for title in titles],
        )
        for chapter, titles in TOPICS.items()
    ]
    return document_toc(Paper(id="psych", title="Psychology", source_format="test", sections=sections))


def test_constrained_answers_are_distinct_real_leaves_best_first(client, toc):
    retriever = TocRetriever(client, TocSettings(top_k=4))
    leaves = {leaf.number for leaf in toc.leaves()}
    for question in ["Why do we dream?", "How does operant conditioning work?", "What is amnesia?"]:
        ranking = retriever.rank(toc, question)
        numbers = [leaf.number for leaf in ranking.leaves]
        assert len(numbers) == 4 and len(set(numbers)) == 4 and set(numbers) <= leaves
        scores = [leaf.score for leaf in ranking.leaves]
        assert scores == sorted(scores, reverse=True) and all(score <= 0 for score in scores)


def test_a_toc_over_the_budget_is_collapsed_and_still_yields_real_leaves(client, toc):
    settings = TocSettings(top_k=2, context_tokens=1024, answer_reserve_tokens=960)  # 64 tokens for the ToC
    retriever = TocRetriever(client, settings)
    (view,) = retriever.views(toc, None)
    assert [choice.number for choice in view.choices] == ["1", "2", "3"]  # chapters only
    ranking = retriever.rank(toc, "What happens during the stages of sleep?")
    assert len(ranking.leaves) == 2
    assert {leaf.number for leaf in ranking.leaves} <= {leaf.number for leaf in toc.leaves()}


def test_free_generation_is_recorded_and_judged(client, toc):
    ranking = TocRetriever(client, TocSettings()).generate(toc, "Why do we forget?")
    assert ranking.raw_output is not None
    assert ranking.hallucinated == (not ranking.leaves)


def test_next_token_logprobs_match_score_and_ignore_the_cache_history(client):
    backend = client.backend
    prompt = Prompt(name="t", system="Answer with a section number.", user="Sections: 1 Sleep, 2 Memory. Dreams?")
    token = backend.tokenize_answer("1")[0]
    first = backend.next_token_logprobs(prompt.system, prompt.user, [])
    backend.next_token_logprobs(prompt.system, prompt.user, backend.tokenize_answer("2 Memory"))
    backend.next_token_logprobs("Another system prompt.", "Other text entirely.", [])
    again = backend.next_token_logprobs(prompt.system, prompt.user, [])
    assert np.array_equal(first, again)
    assert np.exp(first).sum() == pytest.approx(1.0, abs=1e-6)
    (scored,) = client.score(prompt, ["1"])
    assert scored.n_tokens == 1 and first[token] == pytest.approx(scored.logprob, abs=1e-4)
    assert isinstance(client.complete_text(prompt, max_tokens=4), str)
