"""`strata tune-reranker`: an LLM reranker's fusion weight with the first stage, chosen on LLM-written queries of
papers sampled from the user's corpus (never on test questions). Nothing is trained, the reranker is only measured:
where it does not beat the first stage on these queries its weight is 0, and search keeps the first-stage order
without spending its LLM calls. The choice is saved under the store, where `make_reranker` finds it."""

from __future__ import annotations

import time

from strata.config import LLM_RERANKERS
from strata.corpus import Corpus
from strata.index.state import atomic_write
from strata.llm import LLMClient
from strata.progress import Progress
from strata.rerank.factory import make_reranker
from strata.rerank.fusion import TunedFusion, choose_weight, tuned_fusion_file
from strata.rerank.texts import PaperTexts
from strata.train.cross_encoder import MIN_PAPERS, Validation
from strata.train.pairs import llm_queries, sampled_papers

SEED_OFFSET = 5  # another sample of papers than those train-reranker writes queries for


def tune_reranker(corpus: Corpus, client: LLMClient, method: str, progress: Progress | None = None) -> TunedFusion:
    """Write `rerank.train_validation_written` queries (one per sampled paper, its source paper the relevant one),
    rerank their first-stage rankings with `method` alone, choose the fusion weight, save it beside the store."""
    if method not in LLM_RERANKERS:
        raise ValueError(f"tune-reranker measures the LLM rerankers ({', '.join(LLM_RERANKERS)}), not {method!r}; "
                         "train-reranker chooses the cross-encoder's weight")  # fmt: skip
    settings = corpus.settings
    rerank = settings.rerank
    paper_ids = corpus.store.paper_ids()
    if len(paper_ids) < MIN_PAPERS:
        raise ValueError(f"{len(paper_ids)} papers under {settings.store.home}: too few to measure a reranker on "
                         f"(at least {MIN_PAPERS}); search keeps the first-stage order")  # fmt: skip
    if not rerank.train_validation_written:
        raise ValueError("rerank.train_validation_written is 0: no validation queries to measure the reranker on")
    started = time.perf_counter()
    sampled = sampled_papers(paper_ids, rerank.train_validation_written, rerank.train_seed + SEED_OFFSET)
    queries, failed = llm_queries(PaperTexts(corpus.store), sampled, rerank, client, progress, "validation queries")
    if not queries:
        raise ValueError(f"the LLM wrote no usable validation query for {len(sampled)} papers: nothing tuned")
    validation = Validation.held_out(queries, corpus, rerank.pool)
    alone = settings.model_copy(update={"rerank": rerank.model_copy(update={"fusion_weight": 1.0})})
    reranker = make_reranker(alone, corpus.store, client, method)
    reranked = validation.rerank(reranker, progress)
    fusion = choose_weight(validation.first, reranked, validation.query_ndcg, "nDCG@10", k=settings.search.rrf_k,
                           max_p=settings.search.fusion_max_p)
    tuned = TunedFusion(
        method=method,
        model=settings.llm.model,
        fusion=fusion,
        rerank=rerank.model_dump(mode="json"),
        reranker_validation=fusion.curve["1"],  # weight 1 is the reranker's own order
        written_queries=len(queries),
        failed_queries=failed,
        seconds=time.perf_counter() - started,
    )
    # Written whole or not at all: a cut-short run leaves no half-written choice for search to load.
    atomic_write(tuned_fusion_file(settings, method), tuned.model_dump_json(indent=2).encode())
    return tuned
