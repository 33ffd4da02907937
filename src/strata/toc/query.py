"""`strata toc DOCUMENT "question"`: the leaves that answer a question, with their path, text and locator.

The document's STAIR adapter answers when one was trained (`{store.home}/toc/adapters/PAPER_ID/stair`), otherwise
hybrid leaf search (`toc.without_adapter`; the configured LLM zero-shot, decoded through the trie of leaves, scores far
below it with the packaged models); every answer is a real leaf. Documents without an outline get an induced ToC
first. A ToC of one leaf is answered with that leaf, without a model.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from strata.config import Settings
from strata.encoders.embedder import encoder_identity
from strata.documents.model import Locator, Paper
from strata.llm import LLMClient, make_client
from strata.store.protocol import PaperStore
from strata.toc.adapter import has_adapter
from strata.toc.baselines import LeafBM25, LeafHybrid
from strata.toc.encode import PromptEncoder
from strata.toc.fused import AdapterOrder, FusedTocRetriever
from strata.toc.induce import induce_toc, needs_induction
from strata.toc.model import DocumentToc, LeafRanking, ScoredLeaf
from strata.toc.retriever import TocRetriever, toc_llm_settings
from strata.toc.tree import document_toc

STAIR_ADAPTER = "stair"
ONLY_LEAF = "only-leaf"


class TocHit(BaseModel):
    rank: int = Field(ge=1)
    number: str
    label: str
    path: tuple[str, ...]
    score: float
    locator: Locator | None = Field(description="Span from the leaf's first chunk to its last; None if it has none")
    text: str = Field(description="The leaf's text, exactly paper.text over the locator's span")


class TocAnswer(BaseModel):
    paper_id: str
    title: str
    question: str
    method: str = Field(
        description="'stair-fused' (the adapter fused with hybrid search), 'stair-adapter', 'zero-shot', or "
        "'only-leaf' (a ToC of one leaf, answered without a model)"
    )
    induced: bool = Field(description="The ToC was induced (the document has no outline of its own)")
    hits: list[TocHit]
    seconds: float


def adapter_folder(settings: Settings, paper_id: str) -> Path:
    return Path(settings.store.home) / "toc" / "adapters" / paper_id / STAIR_ADAPTER


def leaf_vectors(settings: Settings) -> Path:
    """Where `strata toc` keeps the dense vectors of each document's leaves."""
    return Path(settings.store.home) / "toc" / "leaf-vectors"


def run_toc_query(settings: Settings, document: str, question: str, k: int | None = None) -> TocAnswer:
    """Top-k leaves of `document` (a paper id, or a title matched case-insensitively) for `question`."""
    from strata.store import open_store

    with open_store(settings) as store:
        paper = store.get_paper(resolve_document(store, document))
    return answer_from_toc(settings, paper, question, k)


def answer_from_toc(settings: Settings, paper: Paper, question: str, k: int | None = None) -> TocAnswer:
    """Top-k leaves of an already loaded `paper`'s ToC for `question`."""
    k = k or settings.toc.top_k
    folder = adapter_folder(settings, paper.id)
    use_adapter = settings.toc.use_adapter and has_adapter(folder)
    with ExitStack() as stack:
        # The LLM is loaded only when needed: to title an induced ToC, or to choose between leaves without an adapter.
        def llm() -> LLMClient:
            return stack.enter_context(make_client(toc_llm_settings(settings)))

        client = llm() if needs_induction(paper) else None
        toc, induced = toc_for(paper, settings, client)
        leaves = toc.leaves()
        if not leaves:
            raise ValueError(f"{paper.id}: its ToC has no leaves to answer with")
        if len(leaves) == 1:  # nothing to choose: no model call
            ranking = LeafRanking(query=question, method=ONLY_LEAF, leaves=[leaves[0].scored(0.0)])
            method = ONLY_LEAF
        elif use_adapter:
            ranking = _adapter_ranking(settings, folder, toc, question, k)
            method = ranking.method
        elif settings.toc.without_adapter == "hybrid":
            ranking = leaf_search(settings, toc).rank(question, k)
            method = ranking.method
        else:
            ranking, method = TocRetriever(client or llm(), settings.toc).rank(toc, question, k), "zero-shot"
    hits = [_hit(paper, toc, rank, leaf) for rank, leaf in enumerate(ranking.leaves, start=1)]
    return TocAnswer(
        paper_id=paper.id,
        title=paper.title,
        question=question,
        method=method,
        induced=induced,
        hits=hits,
        seconds=ranking.seconds,
    )


def resolve_document(store: PaperStore, document: str) -> str:
    if store.has_paper(document):
        return document
    wanted = " ".join(document.casefold().split())
    matches = [
        summary.id
        for summary in store.paper_summaries(store.paper_ids()).values()
        if " ".join(summary.title.casefold().split()) == wanted
    ]
    if len(matches) != 1:
        found = "no document" if not matches else f"{len(matches)} documents ({', '.join(sorted(matches))})"
        raise KeyError(f"{found} with id or title {document!r} in the corpus")
    return matches[0]


def toc_for(paper: Paper, settings: Settings, client: LLMClient | None) -> tuple[DocumentToc, bool]:
    """The paper's own ToC, or one induced (titled by `client`) when it has no outline; and whether it was induced."""
    if not needs_induction(paper):
        return document_toc(paper), False
    return induce_toc(paper, settings, client), True


def _adapter_ranking(settings: Settings, folder: Path, toc: DocumentToc, question: str, k: int) -> LeafRanking:
    """The adapter's answer: fused with hybrid search when it was trained with a fusion weight (and
    toc.fusion_candidates is not 0), else its constrained decoding over the whole ToC."""
    from strata.toc.adapter import check_toc, load_adapter, load_base_model, read_adapter_meta, resolve_device
    from strata.toc.decode import rank_questions
    from strata.toc.encode import PromptEncoder

    started = time.perf_counter()
    meta = read_adapter_meta(folder)
    check_toc(meta, toc, folder)  # before the base model loads
    fusing = meta.fusion is not None and settings.toc.fusion_candidates > 0
    if fusing and meta.fused_with and meta.fused_with != fusion_context(settings):
        # Its weight was chosen for another candidate list or fusion: hybrid leaf search, which it never fell below.
        return leaf_search(settings, toc).rank(question, k)
    device = resolve_device(settings.toc.device)
    model, tokenizer, identity = load_base_model(
        settings.toc.train_model, settings.llm.model_dir, device, settings.toc.threads
    )
    tuned = load_adapter(model, folder, identity)
    encoder = PromptEncoder(tokenizer, settings.toc)
    if meta.fusion is not None and settings.toc.fusion_candidates > 0:
        retriever = fused_retriever(settings, toc, tuned, encoder, meta.adapt_toc, meta.fusion.weight)
        ranking = retriever.rank(question, k)
    else:
        asked = settings.toc.model_copy(update={"top_k": k})
        (ranking,) = rank_questions("stair-adapter", tuned, encoder, toc, [question], asked, "stair", free=False,
                                    base_prefix=not meta.adapt_toc)
    return ranking.model_copy(update={"seconds": time.perf_counter() - started})  # loading the model included


def leaf_search(settings: Settings, toc: DocumentToc) -> LeafHybrid | LeafBM25:
    """Leaf search without any model of the document's own: hybrid, or BM25 where the corpus has no dense index."""
    if not settings.index.dense:
        return LeafBM25(toc)
    return LeafHybrid.over(toc, settings.index.embedding, search=settings.search, cache=leaf_vectors(settings))


def fusion_context(settings: Settings) -> dict[str, Any]:
    """The settings a fusion weight chosen on dev questions holds for: the candidates fused, and the leaf search
    giving them."""
    search = settings.search
    return {"toc.fusion_candidates": settings.toc.fusion_candidates, "search.fusion": search.fusion,
            "search.rrf_k": search.rrf_k, "search.dense_weight": search.dense_weight,
            "index.embedding": encoder_identity(settings.index.embedding)}  # fmt: skip


def fused_retriever(
    settings: Settings, toc: DocumentToc, model: Any, encoder: PromptEncoder, adapt_toc: bool, weight: float
) -> FusedTocRetriever:
    """The fused ToC retriever of a trained STAIR adapter on `toc` (`strata.toc.fused`)."""
    hybrid = LeafHybrid.over(toc, settings.index.embedding, search=settings.search, cache=leaf_vectors(settings))
    adapter = AdapterOrder(model, encoder, toc, "stair", adapt_toc)
    return FusedTocRetriever(hybrid, adapter, settings.toc.fusion_candidates, weight, settings.search.rrf_k)


def _hit(paper: Paper, toc: DocumentToc, rank: int, leaf: ScoredLeaf) -> TocHit:
    chunks = toc.leaf_chunks.get(leaf.number, [])
    locator = None
    if chunks:
        start, end = min(c.char_start for c in chunks), max(c.char_end for c in chunks)
        locator = Locator(paper_id=paper.id, char_start=start, char_end=end, section_path=leaf.path)
    return TocHit(
        rank=rank,
        number=leaf.number,
        label=leaf.label,
        path=leaf.path,
        score=leaf.score,
        locator=locator,
        text=locator.resolve(paper.text) if locator else "",
    )


def format_toc_answer(answer: TocAnswer, max_chars: int = 600) -> str:
    """Human-readable answer: each leaf with its path, score, locator and the start of its text."""
    header = f"{answer.title or answer.paper_id} [{answer.paper_id}] - {answer.method}"
    lines = [header + (" (induced ToC)" if answer.induced else ""), f"Q: {answer.question}"]
    for hit in answer.hits:
        lines.append(f"{hit.rank}. {hit.label}  (score {hit.score:.3f})")
        lines.append(f"   path: {' > '.join(hit.path)}")
        if hit.locator is not None:
            lines.append(f"   locator: {hit.locator}")
        if not hit.text.strip():
            lines.append("   (this leaf holds no text)")
            continue
        snippet = hit.text if len(hit.text) <= max_chars else hit.text[:max_chars].rstrip() + " ..."
        lines.extend(f"   {line}" for line in snippet.splitlines() if line.strip())
    return "\n".join(lines)
