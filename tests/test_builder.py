from strata.config import ChunkingSettings
from strata.documents.builder import PaperBuilder
from strata.documents.model import ContentType, Locator


def _builder(max_words: int = 20) -> PaperBuilder:
    return PaperBuilder("p1", "test", ChunkingSettings(max_words=max_words))


def test_sections_nest_by_level_and_close_deeper_ones():
    builder = _builder()
    builder.open_section("Intro", level=1, page=1)
    builder.add_block("First paragraph.", page=1)
    builder.open_section("Background", level=2, page=2)
    builder.add_block("Nested paragraph.", page=2)
    builder.open_section("Methods", level=1, page=3)
    builder.add_block("Method text.", page=3)
    paper = builder.build(title="T")

    assert [s.title for s in paper.sections] == ["Intro", "Methods"]
    assert paper.sections[0].children[0].path == ("Intro", "Background")
    assert paper.sections[0].page_end == 2
    assert [leaf.title for leaf in paper.leaf_sections()] == ["Background", "Methods"]
    assert paper.toc_depth() == 2
    assert [c.section_path for c in paper.chunks] == [("Intro",), ("Intro", "Background"), ("Methods",)]


def test_skipped_level_attaches_to_nearest_open_parent():
    builder = _builder()
    builder.open_section("A", level=1)
    builder.open_section("A.x", level=3)
    paper = builder.build()
    assert paper.sections[0].children[0].level == 2


def test_every_chunk_span_reproduces_its_text():
    builder = _builder(max_words=16)
    builder.open_section("S", level=1)
    builder.add_block("Short one.")
    builder.add_block("Another short.")
    long = " ".join(f"Sentence number {i} is here." for i in range(12))
    builder.add_block(long)
    builder.add_block("Table 1: a | b", ContentType.TABLE)
    paper = builder.build()

    assert len(paper.chunks) > 3
    for chunk in paper.chunks:
        assert paper.text[chunk.char_start : chunk.char_end] == chunk.text
        assert chunk.locator.resolve(paper.text) == chunk.text
    assert paper.chunks[0].text == "Short one.\n\nAnother short."
    assert all(len(c.text.split()) <= 16 for c in paper.chunks if c.content_type == ContentType.TEXT)
    assert paper.chunks[-1].content_type == ContentType.TABLE


def test_text_blocks_of_different_sections_are_not_merged():
    builder = _builder(max_words=100)
    builder.open_section("A", level=1)
    builder.add_block("alpha")
    builder.open_section("B", level=1)
    builder.add_block("beta")
    assert [c.text for c in builder.build().chunks] == ["alpha", "beta"]


def test_locator_round_trips_through_its_string_form():
    locator = Locator(paper_id="10.1016_j.cell.2024#x", char_start=5, char_end=17)
    assert Locator.parse(str(locator)) == locator


def test_malformed_locator_is_a_clear_error():
    import pytest

    with pytest.raises(ValueError, match="PAPER_ID#START-END"):
        Locator.parse("paper-without-span")


def test_headings_asked_for_one_level_are_siblings_even_when_that_level_was_skipped():
    # '4 Results' then '4.1.1 Setup A' and '4.1.2 Setup B' (no 4.1): B nested inside A when levels were compared
    # after A had been moved up to depth 2.
    from strata.documents.builder import PaperBuilder

    builder = PaperBuilder("p", "test")
    builder.open_section("Results", 1)
    for title in ("Setup A", "Setup B"):
        builder.open_section(title, 3)
        builder.add_block(f"{title} text.")
    paper = builder.build(title="P")
    assert [section.path for section in paper.walk_sections()] == [
        ("Results",), ("Results", "Setup A"), ("Results", "Setup B")]
