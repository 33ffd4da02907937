"""The fused ToC retriever: hybrid candidates (BM25 + dense over leaf text) ordered by an adapter and fused by rank
at a weight chosen on dev questions, so an adapter that does not help on dev leaves the hybrid order alone."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from strata.config import EmbeddingSettings
from strata.documents.builder import PaperBuilder
from strata.toc.baselines import LeafHybrid
from strata.toc.fused import FusedTocRetriever, choose_fusion_weight
from strata.toc.model import DocumentToc, TocEntry, TrainingQuestion
from strata.toc.tree import document_toc

LEAVES = {
    "Oceans": "Tides rise and fall twice a day because of the moon's gravity.",
    "Volcanoes": "Magma rises through the crust and erupts as lava and ash.",
    "Glaciers": "Ice sheets carve valleys as they slowly flow downhill.",
    "Deserts": "Dunes form where wind carries sand across dry land.",
}
# Dev questions with their gold leaf: the last two word another leaf's subject (as a question about a leaf's
# consequences can), so hybrid search gets only the first two right and an adapter that knows can add.
DEV = [("What does the moon pull on?", "Oceans"), ("Where does lava come from?", "Volcanoes"),
       ("What carries sand across dry land?", "Glaciers"), ("Why does the tide rise twice?", "Deserts")]


class ScriptedAdapter:
    """Orders the candidates with a chosen leaf (by title) first: an adapter that knows, or one that misleads."""

    def __init__(self, toc: DocumentToc, first: dict[str, str]) -> None:
        self.toc, self.first = toc, first

    def order(self, question: str, candidates: Sequence[TocEntry]) -> list[str]:
        ahead = [entry.number for entry in candidates if entry.title == self.first[question]]
        return ahead + [entry.number for entry in candidates if entry.number not in ahead]


@pytest.fixture(scope="module")
def toc() -> DocumentToc:
    builder = PaperBuilder("earth", "test")
    for title, text in LEAVES.items():
        builder.open_section(title, 1)
        builder.add_block(text)
    return document_toc(builder.build(title="Earth"))


@pytest.fixture(scope="module")
def hybrid(toc) -> LeafHybrid:
    return LeafHybrid.over(toc, EmbeddingSettings(threads=1))


def dev_split(toc: DocumentToc) -> list[TrainingQuestion]:
    number = {leaf.title: leaf.number for leaf in toc.leaves()}
    return [TrainingQuestion(leaf=number[title], question=question, split="dev") for question, title in DEV]


def test_hybrid_fuses_bm25_and_dense_over_every_leaf(toc, hybrid):
    ranking = hybrid.rank("Why do tides follow the moon?", 4)
    assert len(ranking.leaves) == 4 and ranking.method == "hybrid"
    assert toc.entry(ranking.leaves[0].number).title == "Oceans"


def test_a_knowing_adapter_gets_weight_and_fixes_the_top_leaf_a_misleading_one_gets_none(toc, hybrid):
    dev = dev_split(toc)
    title = {leaf.number: leaf.title for leaf in toc.leaves()}
    knowing = FusedTocRetriever(hybrid, ScriptedAdapter(toc, dict(DEV)), candidates=4, weight=0.0)
    choice = choose_fusion_weight(knowing, dev)
    assert choice.curve["0"] == 0.5  # hybrid alone
    assert choice.weight > 0 and choice.curve[f"{choice.weight:g}"] == 1.0 and choice.queries == 4
    knowing.weight = choice.weight
    assert [title[knowing.rank(question, 1).leaves[0].number] for question, _ in DEV] == [t for _, t in DEV]
    # Two dev questions fixed of four are too little evidence for the fusion `strata train-toc` asks for.
    gated = choose_fusion_weight(knowing, dev, max_p=0.05)
    assert gated.weight == 0.0 and gated.best_weight == choice.weight and gated.p_value > 0.05

    wrong = {question: next(t for t in LEAVES if t != gold) for question, gold in DEV}
    misleading = FusedTocRetriever(hybrid, ScriptedAdapter(toc, wrong), candidates=4, weight=0.0)
    choice = choose_fusion_weight(misleading, dev)
    assert choice.weight == 0.0 and choice.gain == 0.0
    # Weight 0 is the hybrid order, untouched, and the adapter is not asked.
    misleading.adapter = ScriptedAdapter(toc, {})  # knows no question: a KeyError if it were asked
    for question, _ in DEV:
        fused = [leaf.number for leaf in misleading.rank(question, 4).leaves]
        assert fused == [leaf.number for leaf in hybrid.rank(question, 4).leaves]
