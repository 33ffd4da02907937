"""CoRank features from a paper's parsed section tree, on a scripted fake LLM: the paper's own section titles, a gist
per section mapped back by position, tolerance of answers with wrong or missing sections, abstract-only papers as
before, and cache invalidation of features extracted from the first words."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from test_rerank_unit import HashEmbedder, RankingBackend, client_with

from strata.config import RerankSettings
from strata.documents.builder import PaperBuilder
from strata.documents.model import ContentType, Paper
from strata.rerank.features import CompactFeatures, FeatureCache, StoredFeatures
from strata.rerank.model import PaperFeatures, SectionGist
from strata.rerank.texts import PaperTexts
from strata.store.sqlite import CorpusStore

SECTION_LINE = re.compile(r"^\[\d+\] [^:]*: (.*)$", re.MULTILINE)
TITLE = "Zinc and colds"
ABSTRACT = "Zinc lozenges shorten colds. We test them in a trial."
EXTRACTOR = "fake-llm\x00hash-encoder\x0020"


class SectionsBackend(RankingBackend):
    """RankingBackend that also answers section prompts (default: each gist is the first three words of its
    section's listed text) and records the schema of every request."""

    def __init__(self, scripted: list[str] | None = None) -> None:
        super().__init__(scripted)
        self.schemas: list[dict | None] = []

    def generate(self, system, user, schema, options):
        self.schemas.append(schema)
        if not self.scripted and "Sections:" in user:
            gists = [" ".join(text.split()[:3]) for text in SECTION_LINE.findall(user)]
            self.scripted.append(answer(gists))
        return super().generate(system, user, schema, options)


def answer(gists: list[str], **extra: object) -> str:
    return json.dumps({"category": ["Medicine", "Colds"], "gists": gists, "keywords": ["zinc", "placebo"], **extra})


def sectioned_paper(paper_id: str = "s1", methods: str = "Adults took 80 mg zinc daily. Others took placebo.") -> Paper:
    """Four sections with prose (Methods' in a subsection), more than the model's own three, and References (reference
    entries only)."""
    builder = PaperBuilder(paper_id, "test")
    for title, text in [
        ("Abstract", ABSTRACT),
        ("Introduction", "Colds cost work days. Zinc is a common remedy."),
        ("Methods", None),
        ("Results", "Colds lasted four days on zinc. Placebo colds lasted six."),
    ]:
        builder.open_section(title, level=1)
        if text is None:
            builder.open_section("Participants and dosing schedule", level=2)
        builder.add_block(text or methods)
    builder.open_section("References", level=1)
    builder.add_block("Smith J. Zinc and colds. 2001.", ContentType.REFERENCE)
    return builder.build(title=TITLE, abstract=ABSTRACT)


def abstract_paper(paper_id: str = "a1") -> Paper:
    return Paper(id=paper_id, title=TITLE, abstract=ABSTRACT, source_format="beir")


def first_words_hash(paper: Paper) -> str:
    """The content hash features were cached under when they came from a paper's first words."""
    return hashlib.sha256("\n".join([paper.title, " ".join(paper.abstract.split())]).encode()).hexdigest()


@pytest.fixture()
def store(tmp_path: Path):
    store = CorpusStore(tmp_path / "corpus.sqlite3")
    yield store
    store.close()


def features_of(store: CorpusStore, backend: RankingBackend, tmp_path: Path, **settings) -> CompactFeatures:
    cache = FeatureCache(tmp_path / "features.sqlite3", EXTRACTOR)
    return CompactFeatures(cache, PaperTexts(store), HashEmbedder(), RerankSettings(**settings), client_with(backend))


def sections_of(features: CompactFeatures, paper_id: str) -> list[tuple[str, str]]:
    stored = features.cache.get(paper_id, features.texts.content_hash(paper_id))
    assert stored is not None
    return [(section.title, section.gist) for section in stored.features.sections]


def test_a_sectioned_paper_lists_its_own_sections_and_each_gist_goes_to_its_section(store, tmp_path):
    store.put_paper(sectioned_paper(), "sha")
    gists = ["Zinc shortens colds", "Colds cost work days", "A zinc dose trial", "Zinc colds are shorter"]
    backend = SectionsBackend([answer(gists)])
    features = features_of(store, backend, tmp_path, features_input_words=20)
    features.ensure(["s1"])
    (request,) = backend.requests
    assert request.splitlines()[2:] == [  # 20 words shared by 4 sections; the subsection's text is under Methods
        "[1] Abstract: Zinc lozenges shorten colds. We",
        "[2] Introduction: Colds cost work days. Zinc",
        "[3] Methods: Adults took 80 mg zinc",
        "[4] Results: Colds lasted four days on",
    ]
    schema = backend.schemas[0]["properties"]["gists"]
    assert (schema["minItems"], schema["maxItems"]) == (4, 4)
    assert sections_of(features, "s1") == list(zip(["Abstract", "Introduction", "Methods", "Results"], gists))


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            answer([" ", "Colds cost work days"], sections=[{"title": "Background", "gist": "made up"}]),
            ["Zinc lozenges shorten colds.", "Colds cost work days", "Adults took 80 mg zinc daily.",
             "Colds lasted four days on zinc."],
        ),
        (
            answer(["One", "Two", "Three", "Four", "Five"]),
            ["One", "Two", "Three", "Four"],
        ),
    ],
    ids=["invented-titles-blank-and-missing-gists", "too-many-gists"],
)
def test_an_answer_with_wrong_or_missing_sections_still_has_the_papers_titles(store, tmp_path, reply, expected):
    """Gists go to the sections by position; a blank or missing one is its section's first sentence."""
    store.put_paper(sectioned_paper(), "sha")
    features = features_of(store, SectionsBackend([reply]), tmp_path)
    assert features.ensure(["s1"]).extracted == 1
    assert sections_of(features, "s1") == list(zip(["Abstract", "Introduction", "Methods", "Results"], expected))


def test_a_paper_lists_at_most_eight_sections_with_long_titles_clipped_at_a_word_end(store, tmp_path):
    builder = PaperBuilder("long", "test")
    for title in ["Conclusions and directions for future work", "Supercalifragilisticexpialidocious"] * 5:
        builder.open_section(title, level=1)
        builder.add_block("Some text here.")
    store.put_paper(builder.build(title=TITLE), "sha")
    backend = SectionsBackend()
    features = features_of(store, backend, tmp_path)
    features.ensure(["long"])
    assert len(SECTION_LINE.findall(backend.requests[0])) == 8
    assert [title for title, _ in sections_of(features, "long")] == ["Conclusions and", "Supercalifragilisticexpi"] * 4


def test_abstract_only_papers_are_extracted_from_their_first_words_as_before(store, tmp_path):
    only_abstract = Paper(
        **{**sectioned_paper("one").model_dump(), "sections": sectioned_paper().sections[:1]}  # a single section
    )
    for paper in (abstract_paper(), only_abstract):
        store.put_paper(paper, "sha")
    backend = SectionsBackend()
    features = features_of(store, backend, tmp_path, features_input_words=20)
    assert features.ensure(["a1", "one"]).extracted == 2
    assert backend.requests[0] == f"Document:\nTitle: {TITLE}\n{ABSTRACT}"
    assert all(request.startswith("Document:") for request in backend.requests)
    assert sections_of(features, "a1") == [("Results", f"{TITLE} results")]  # the model's own part
    assert features.texts.content_hash("a1") == first_words_hash(abstract_paper())  # old cached rows stay current


def test_features_cached_from_a_sectioned_papers_first_words_are_extracted_again(store, tmp_path):
    paper = sectioned_paper()
    store.put_paper(paper, "sha")
    features = features_of(store, SectionsBackend(), tmp_path)
    invented = [SectionGist(title="Results", gist="x")]  # what the model named from the first words
    old = StoredFeatures(
        features=PaperFeatures(category=["Medicine"], sections=invented, keywords=["zinc"]),
        section_vectors=HashEmbedder().embed(["Results: x"]),
        keyword_vectors=HashEmbedder().embed(["zinc"]),
    )
    features.cache.put("s1", first_words_hash(paper), "fake-1", old)
    assert features.ensure(["s1"]).extracted == 1
    assert [title for title, _ in sections_of(features, "s1")] == ["Abstract", "Introduction", "Methods", "Results"]
    assert features.ensure(["s1"]).cached == 1
    store.put_paper(sectioned_paper(methods="Adults took 10 mg zinc daily."), "sha2")
    changed = features_of(store, SectionsBackend(), tmp_path)  # a fresh PaperTexts reads the changed section
    assert changed.ensure(["s1"]).extracted == 1


def test_form4_shows_the_most_query_similar_real_section(store, tmp_path):
    store.put_paper(sectioned_paper(), "sha")
    features = features_of(store, SectionsBackend(), tmp_path, keywords=1)
    features.ensure(["s1"])
    text = features.form4(HashEmbedder().embed_query("Methods: Adults took 80"), "s1")
    assert text == "Category: Medicine > Colds. Section: Methods: Adults took 80. Keywords: zinc"
