"""STAIR-style table-of-contents retrieval: answer a question with the leaf section that holds the answer.

    from strata.toc import document_toc
    from strata.toc.retriever import TocRetriever
    from strata.toc.query import run_toc_query, format_toc_answer

    toc = document_toc(paper)                                  # numbered ToC; leaves own their chunks
    ranking = TocRetriever(client, settings.toc).rank(toc, q)  # trie-constrained: only real leaves
    answer = run_toc_query(settings, "psychology-2e", q)       # store -> ToC (or induced) -> leaves, text, locators

Modules: model (typed data, the prompts' registry), tree (ToC and prompt views), trie (constrained search),
retriever (zero-shot, llama.cpp or HTTP), baselines (BM25, dense), synthetic (training questions), encode, decode and
adapter (a STAIR/DSI adapter on transformers: prompt tokens, trie-constrained beam search, adapter files), induce
(ToC for documents without an outline), query (the `strata toc` command). The LoRA training is `strata.train`, the
CPU/GPU experiment `strata.experiments.stair`. This package imports only the light modules, so a GPU machine without
the corpus stack (tantivy, faiss, llama.cpp) can run the experiment.
"""

from strata.toc.model import DocumentToc, LeafRanking, ScoredLeaf, TocEntry
from strata.toc.tree import document_toc, plan_views, render_toc

__all__ = ["DocumentToc", "LeafRanking", "ScoredLeaf", "TocEntry", "document_toc", "plan_views", "render_toc"]
