"""Synthetic training questions: deterministic per-leaf train/dev split, lenient parsing, on-disk cache."""

from __future__ import annotations

from pathlib import Path

from strata.config import TocSettings
from strata.documents.builder import PaperBuilder
from strata.toc.model import SyntheticQuestions
from strata.toc.synthetic import (
    QuestionCache,
    cached_questions,
    clean_questions,
    generate_questions,
    parse_questions,
    prompt_sha,
    question_prompts,
    split_questions,
)
from strata.toc.tree import document_toc

QUESTIONS = {f"{leaf}": [f"Question {q} about leaf {leaf}?" for q in range(n)] for leaf, n in [(1, 5), (2, 1), (3, 4)]}


def test_split_is_per_leaf_deterministic_and_holds_out_the_configured_share():
    first = split_questions(QUESTIONS, dev_fraction=0.25, seed=7)
    again = split_questions({leaf: list(reversed(qs)) for leaf, qs in reversed(QUESTIONS.items())}, 0.25, 7)
    assert first == again  # input order does not matter
    dev = {leaf: sum(1 for q in first if q.leaf == leaf and q.split == "dev") for leaf in QUESTIONS}
    assert dev == {"1": 1, "2": 0, "3": 1}  # a leaf with one question keeps it for training
    assert sorted(q.question for q in first) == sorted(q for qs in QUESTIONS.values() for q in qs)
    other_seed = split_questions(QUESTIONS, 0.25, 8)
    assert {q.question for q in other_seed if q.split == "dev"} != {q.question for q in first if q.split == "dev"}


def test_a_question_written_for_two_leaves_is_in_neither_split():
    shared = {"1": ["What is the spinal cord?", "Where do nerves start?"], "2": ["what is the  spinal cord?", "Why?"]}
    split = split_questions(shared, dev_fraction=0.5, seed=7)
    assert sorted((q.leaf, q.question) for q in split) == [("1", "Where do nerves start?"), ("2", "Why?")]


def test_questions_parse_from_json_or_from_quoted_questions_in_broken_json():
    assert parse_questions('{"questions": ["What is X?", "Why Y?"]}') == ["What is X?", "Why Y?"]
    assert parse_questions('{"questions": ["What causes sleep apnea?", "How is it treated?"') == [
        "What causes sleep apnea?",
        "How is it treated?",
    ]
    assert parse_questions("no questions here") == []
    assert clean_questions([" What  is X? ", "what is x?", "", "Why?"]) == ["What is X?", "Why?"]


class FakeClient:
    """Answers every question prompt, counting the calls."""

    model = "fake"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, prompt, schema):
        self.prompts.append(prompt.user)
        return SyntheticQuestions(questions=[f"Q{len(self.prompts)} one?", f"Q{len(self.prompts)} two?"])


def test_generation_asks_per_passage_without_the_title_and_then_answers_from_the_cache(tmp_path: Path):
    builder = PaperBuilder("book", "test")
    for title in ("Alpha", "Beta"):
        builder.open_section(title, 1)
        builder.add_block(" ".join(f"{title.lower()}{i}" for i in range(100)))
    toc = document_toc(builder.build(title="Book"))
    settings = TocSettings(passage_words=40, passages_per_leaf=3, questions_per_leaf=6)
    cache = QuestionCache(tmp_path, toc.paper_id, "fake")
    client = FakeClient()
    first = generate_questions(client, toc, toc.leaves(), settings, cache)
    assert len(client.prompts) == 6 and "Write 2 questions." in client.prompts[0]
    passages = [prompt.split("Passage:\n")[1].split() for prompt in client.prompts[:3]]
    # Three windows of 40 words spread over the leaf's 100: its start, middle and end.
    assert [(words[0], words[-1], len(words)) for words in passages] == [
        ("alpha0", "alpha39", 40), ("alpha30", "alpha69", 40), ("alpha60", "alpha99", 40)
    ]
    assert not any("Alpha" in prompt or "Beta" in prompt for prompt in client.prompts)  # no title or path shown
    assert len(first["1"]) == 6
    assert generate_questions(client, toc, toc.leaves(), settings, cache) == first and len(client.prompts) == 6
    # A different prompt (more words per passage) is a cache miss; its questions are cached beside the first ones.
    wider = settings.model_copy(update={"passage_words": 60})
    assert cached_questions(toc, toc.leaves(), wider, cache) == {}
    generate_questions(client, toc, toc.leaves(), wider, cache)
    # 2 windows of 60 words per leaf: 4 new prompts; the first recipe's questions are still there.
    assert len(client.prompts) == 6 + 4 and cached_questions(toc, toc.leaves(), settings, cache) == first


def test_the_cache_key_covers_the_instructions_not_only_the_passages():
    builder = PaperBuilder("book", "test")
    builder.open_section("Alpha", 1)
    builder.add_block("Tidal channels carry seawater into a marsh twice a day.")
    toc = document_toc(builder.build(title="Book"))
    prompts = question_prompts(toc, toc.leaves()[0], TocSettings())
    edited = [prompt.model_copy(update={"system": prompt.system + " Be brief."}) for prompt in prompts]
    assert prompt_sha(edited) != prompt_sha(prompts)


def test_a_short_leaf_is_one_passage_asked_for_all_its_questions(tmp_path: Path):
    builder = PaperBuilder("book", "test")
    for title in ("Alpha", "Beta"):
        builder.open_section(title, 1)
        builder.add_block("Short text about tides and marshes.")
    toc = document_toc(builder.build(title="Book"))
    client = FakeClient()
    settings = TocSettings(passage_words=40, passages_per_leaf=4, questions_per_leaf=8)
    generate_questions(client, toc, toc.leaves(), settings, QuestionCache(tmp_path, toc.paper_id, "fake"))
    assert len(client.prompts) == 2 and "Write 8 questions." in client.prompts[0]


def test_near_duplicate_questions_and_copied_passages_are_dropped():
    kept = clean_questions([
        "What causes the tides in a salt marsh?",
        "Tidal channels carry seawater into a marsh twice a day, " * 5 + "do they?",  # 51 words: copied text
        "What causes the tides in a salt marsh ?",
        "What causes tides in the salt marsh?",
        "How does cordgrass trap sediment?",
    ])
    assert kept == ["What causes the tides in a salt marsh?", "How does cordgrass trap sediment?"]
