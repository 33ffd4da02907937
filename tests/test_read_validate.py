"""Deterministic citation validation: only passages the store reproduces survive, and a claim needs one."""

import pytest
from pydantic import ValidationError

from strata.documents.builder import PaperBuilder
from strata.read.model import Answer, Claim, Evidence, citing_only
from strata.read.synthesize import best_window, quoted
from strata.read.validate import validate_answer
from strata.store.sqlite import CorpusStore

BODY = "Mice fed the diet gained 12 g in four weeks. Controls gained 5 g. The difference was significant (p < 0.01)."


@pytest.fixture()
def store(tmp_path):
    builder = PaperBuilder("diet", "test")
    builder.open_section("Results", level=1, page=3)
    builder.add_block(BODY, page=3)
    paper = builder.build(title="A high-fat diet study")
    with CorpusStore(tmp_path / "c.db") as opened:
        opened.put_paper(paper, "sha")
        yield opened


def evidence_for(store: CorpusStore, number: int = 1, **changes) -> Evidence:
    chunk = store.get_paper("diet").chunks[0]
    item = Evidence(
        number=number, paper_id="diet", locator=str(chunk.locator), text=chunk.text, quote="Controls gained 5 g."
    )
    return item.model_copy(update=changes)


def answer_with(evidence: list[Evidence], claims: list[Claim], **fields) -> Answer:
    return Answer(question="How much did controls gain?", text="5 g", claims=claims, evidence=evidence, **fields)


def test_valid_evidence_is_kept_and_completed_from_the_store(store):
    checked = validate_answer(answer_with([evidence_for(store)], [Claim(text="5 g", citations=[1])]), store)
    assert checked.supported and checked.dropped_claims == 0 and checked.rejections == []
    (item,) = checked.evidence
    assert (item.title, item.section_path, item.page) == ("A high-fat diet study", ("Results",), 3)


def test_a_fabricated_paper_and_a_misquoted_passage_are_both_rejected(store):
    """An LLM answer citing a paper outside the corpus and quoting words the cited passage does not contain."""
    invented = evidence_for(store, 1, paper_id="smith2020", locator="smith2020#0-40", text="Controls gained 5 g.")
    misquoted = evidence_for(store, 2, quote="Controls gained 7 g in four weeks.")
    claims = [Claim(text="Controls gained 5 g", citations=[1]), Claim(text="Controls gained 7 g", citations=[2])]
    checked = validate_answer(answer_with([invented, misquoted], claims), store)
    assert checked.evidence == [] and checked.claims == []
    assert checked.dropped_claims == 2 and not checked.supported
    assert any("smith2020" in why and "not in the corpus" in why for why in checked.rejections)
    assert any("quote is not in" in why for why in checked.rejections)


def test_a_locator_outside_the_paper_or_into_another_paper_is_rejected(store):
    beyond = evidence_for(store, 1, locator="diet#0-99999")
    elsewhere = evidence_for(store, 2, locator="other#0-10")
    checked = validate_answer(answer_with([beyond, elsewhere], [Claim(text="x", citations=[1, 2])]), store)
    assert checked.evidence == [] and checked.dropped_claims == 1
    assert len(checked.rejections) == 3  # two pieces of evidence, then the claim


def test_matching_ignores_case_and_whitespace_but_not_words(store):
    spaced = evidence_for(store, quote="controls   GAINED\n5 g.")
    assert validate_answer(answer_with([spaced], [Claim(text="5 g", citations=[1])]), store).supported


def test_validated_evidence_carries_the_store_text_not_the_answer_spelling_of_it(store):
    respelled = evidence_for(store, text="MICE fed the  diet\ngained 12 g", quote="controls   GAINED\n5 g.")
    (item,) = validate_answer(answer_with([respelled], [Claim(text="5 g", citations=[1])]), store).evidence
    assert (item.text, item.quote) == ("Mice fed the diet gained 12 g", "Controls gained 5 g.")


def test_partly_valid_claims_keep_their_valid_citations_renumbered(store):
    good, bad = evidence_for(store, 2), evidence_for(store, 1, quote="Controls lost weight.")
    claims = [Claim(text="5 g", citations=[1, 2]), Claim(text="unsupported", citations=[1]), Claim(text="none")]
    checked = validate_answer(answer_with([bad, good], claims), store)
    assert [claim.citations for claim in checked.claims] == [[1]] and checked.dropped_claims == 2
    assert [item.number for item in checked.evidence] == [1] and checked.evidence[0].quote == good.quote
    assert checked.supported


def test_a_multiple_choice_answer_must_be_one_of_the_options(store):
    claims = [Claim(text="5 g", citations=[1])]
    outside = answer_with([evidence_for(store)], claims, format="mc", choice="6 g")
    checked = validate_answer(outside, store, options=["5 g", "12 g"])
    assert checked.choice is None and not checked.supported
    inside = validate_answer(outside.model_copy(update={"choice": "5 g"}), store, options=["5 g", "12 g"])
    assert inside.choice == "5 g" and inside.supported


def test_answer_models_only_accept_the_evidence_numbers_given():
    text_model, table_model = citing_only([1, 2])
    assert text_model.model_validate({"answerable": True, "answer": "x", "evidence": [2]}).evidence == [2]
    with pytest.raises(ValidationError):
        text_model.model_validate({"answerable": True, "answer": "x", "evidence": [3]})
    with pytest.raises(ValidationError):
        table_model.model_validate({"answerable": True, "header": ["a"], "rows": [{"cells": ["1"], "evidence": [9]}]})
    assert text_model.model_json_schema()["properties"]["evidence"]["items"]["enum"] == [1, 2]


def test_quotes_are_the_sentences_sharing_most_terms_and_uncited_evidence_is_dropped(store):
    assert best_window(BODY, "How much weight did the controls gain?", 1) == "Controls gained 5 g."
    assert best_window(BODY, "significant difference between controls", 2).startswith("Controls gained 5 g.")
    answer = answer_with([evidence_for(store, 1, quote=""), evidence_for(store, 2, quote="")],
                         [Claim(text="Controls gained 5 g", citations=[2])])
    kept = quoted(answer, 1)
    assert [item.number for item in kept.evidence] == [2] and kept.evidence[0].quote == "Controls gained 5 g."
    assert validate_answer(kept, store).supported


def test_citation_marks_and_locators_written_in_the_prose_are_removed(store):
    """An injected or invented '[7]' or 'smith2020#0-40' in the answer text must not look like a citation."""
    prose = "Controls gained 5 g [7], as smith2020#0-40 shows [1, 2]."
    claims = [Claim(text=prose, citations=[1])]
    answer = Answer(question="How much did controls gain?", text=prose, claims=claims, evidence=[evidence_for(store)])
    checked = validate_answer(answer, store)
    assert checked.text == "Controls gained 5 g, as shows." == checked.claims[0].text
    assert checked.claims[0].citations == [1]
    assert validate_answer(answer_with([evidence_for(store)], [Claim(text="5 g", citations=[1])]), store).text == "5 g"


def fact(value: str, unit: str, number: int = 1) -> Claim:
    return Claim(text=f"{value} {unit}".strip(), citations=[number], value=value, unit=unit or None)


def test_a_made_up_value_citing_a_real_passage_is_rejected(store):
    """The passage is real and validly located, but it reports 5 g and 12 g, not 7 g: the made-up fact is dropped,
    and so is the prose restating it (it stood unchecked, supported)."""
    claims = [Claim(text="Controls gained 7 g.", citations=[1]), fact("7", "g")]
    checked = validate_answer(answer_with([evidence_for(store)], claims), store)
    assert checked.claims == [] and checked.dropped_claims == 2 and not checked.supported
    assert any("[1] does not state the value '7 g'" in why for why in checked.rejections)
    assert any("no cited passage states its number 7" in why for why in checked.rejections)
    stated = [Claim(text="Controls gained 5 g, mice 12 g (p < 0.01).", citations=[1]), fact("7", "g")]
    checked = validate_answer(answer_with([evidence_for(store)], stated), store)
    assert [claim.value for claim in checked.claims] == [None] and checked.supported  # its numbers are stated


def test_a_value_with_the_wrong_unit_is_rejected_and_spelling_differences_are_not(store):
    claims = [fact("5", "kg"), fact("5.0", "g"), fact("12 g", ""), fact("0.01", ""), fact("1", "g"), fact("5", "G")]
    checked = validate_answer(answer_with([evidence_for(store)], claims), store)
    assert [claim.text for claim in checked.claims] == ["5.0 g", "12 g", "0.01"]  # '1 g': no such number
    assert checked.dropped_claims == 3 and checked.supported  # 'G' (gauss) is not 'g' (gram)


def test_a_unit_symbol_is_compared_in_its_own_case_and_a_unit_word_in_any():
    from strata.read.validate import states_value

    assert states_value("5", "mW", "a 5 mW laser") and not states_value("5", "mW", "a 5 MW plant")
    assert not states_value("3", "mm", "3 Mm away") and not states_value("3", "K", "rose by 3 k")
    assert states_value("12", "Å", "a 12 A\u02da pore") and not states_value("12", "Å", "a 12 A current")
    assert states_value("4.2", "mg/mL", "at 4.2 mg/ml") and states_value("4.2", "mg/ml", "at 4.2 mg/mL")  # litre
    assert states_value("12", "hours", "for 12 Hours") and states_value("30", "Patients", "30 patients enrolled")


def test_a_unit_belongs_to_its_own_number():
    from strata.read.validate import states_value

    passage = "12 patients received 5 mg."
    assert not states_value("12", "mg", passage) and states_value("5", "mg", passage)
    assert states_value("12", "g", "gained 12 ± 3 g") and states_value("12", "g", "mass (g): 12")  # '± 3' is its own
    assert not states_value("5", "g", "mass (g): 12 and 5")
    # A spread between a value and its unit qualifies the value: it is no other value.
    assert states_value("54", "years", "Mean age was 54 (SD 8) years.")
    assert states_value("36", "months", "median follow-up 36 (IQR 24–48) months")
    assert states_value("4.2", "mg/ml", "4.2 (95% CI 3.9-4.5) mg/ml")
    # A unit before the value that follows another number is that number's.
    assert not states_value("12", "mg", "The dose was raised from 5 mg to 12 g.")
    assert not states_value("12", "mg", "Mice received 5 mg and 12 injections.")


def test_the_digits_of_a_name_are_no_value():
    from strata.read.validate import states_value

    assert not states_value("6", "", "IL-6 was elevated in all 40 patients.")
    assert not states_value("53", "", "p53 was mutated in 12 tumours.")
    assert states_value("40", "", "IL-6 was elevated in all 40 patients.") and states_value("12", "", "in 12 tumours")


def test_a_calculation_stands_only_on_facts_the_passage_states(store):
    kept = Claim(text="12 - 5 = 7 g", citations=[1], value="7", unit="g", expression="12 - 5")
    invented = Claim(text="12 - 4 = 8 g", citations=[1], value="8", unit="g", expression="12 - 4")
    miscomputed = Claim(text="12 - 5 = 6 g", citations=[1], value="6", unit="g", expression="12 - 5")
    claims = [fact("12", "g"), fact("5", "g"), fact("4", "g"), kept, invented, miscomputed]
    checked = validate_answer(answer_with([evidence_for(store)], claims), store)
    assert [claim.text for claim in checked.claims] == ["12 g", "5 g", "12 - 5 = 7 g"]
    assert any("4 in '12 - 4' is not the value of any fact" in why for why in checked.rejections)
    assert any("is 7, not 6" in why for why in checked.rejections)


def test_a_calculation_cites_the_passages_of_its_facts_not_one_validation_rejected(store):
    first = BODY.index("Controls")
    other = Evidence(number=2, paper_id="diet", locator=f"diet#0-{first - 1}", text=BODY[: first - 1], quote="")
    claims = [fact("5", "g"), Claim(text="5 + 5 = 10 g", citations=[1, 2], value="10", unit="g", expression="5 + 5")]
    claims[0] = claims[0].model_copy(update={"citations": [1, 2]})  # [2] reports 12 g only
    checked = validate_answer(answer_with([evidence_for(store), other], claims), store)
    assert [(claim.text, claim.citations) for claim in checked.claims] == [("5 g", [1]), ("5 + 5 = 10 g", [1])]
    assert [item.number for item in checked.evidence] == [1]  # nothing left cites the other passage


def test_a_signed_or_leading_point_number_is_its_own_value(store):
    from strata.read.validate import states_value

    assert not states_value("-3", "°C", "the core rose by 3 °C") and states_value("-3", "°C", "fell to −3 °C")
    assert states_value("0.05", "", "p < .05") and not states_value("5", "", "p < .05")
    assert states_value("2", "mV", "a shift of +2 mV") and not states_value("-6", "", "IL-6 rose")  # no sign
    assert not states_value("6", "", "IL-6 rose")  # nor a value: the digits of a name


def test_a_multiple_choice_answer_whose_passage_does_not_state_it_is_unsupported(store):
    options = ["5 g", "7 g", "12 g"]
    stated = answer_with([evidence_for(store)], [Claim(text="5 g", citations=[1])], format="mc", choice="5 g")
    assert validate_answer(stated, store, options).supported
    unstated = stated.model_copy(update={"choice": "7 g", "text": "7 g", "claims": [Claim(text="7 g", citations=[1])]})
    checked = validate_answer(unstated, store, options)
    assert checked.choice == "7 g" and not checked.supported and checked.evidence == []
    assert any("does not state the chosen option '7 g'" in why for why in checked.rejections)


def test_an_option_holding_a_citation_mark_is_still_checked_against_its_passage(store):
    """'[2]' names a reference the question cites, not something the passage states: the option is checked without
    it (the claim's text loses it as prose does), and checked all the same."""
    options = ["5 g [2]", "7 g [3]"]
    stated = answer_with([evidence_for(store)], [Claim(text=options[0], citations=[1])], format="mc", choice=options[0])
    assert validate_answer(stated, store, options).supported
    unstated = stated.model_copy(update={"choice": options[1], "claims": [Claim(text=options[1], citations=[1])]})
    checked = validate_answer(unstated, store, options)
    assert not checked.supported and any("does not state the chosen option '7 g'" in why for why in checked.rejections)


def test_a_reference_list_entry_is_rejected_as_evidence(tmp_path):
    builder = PaperBuilder("cited", "test")
    builder.open_section("Results", level=1, page=1)
    builder.add_block("Controls gained 5 g.", page=1)
    builder.open_section("References", level=1, page=2)
    builder.add_block("Smith J. Controls gained 5 g on the diet. J Diet 2020;3:1-9.", page=2)
    with CorpusStore(tmp_path / "r.db") as opened:
        opened.put_paper(builder.build(title="Cited"), "sha")
        chunks = opened.get_paper("cited").chunks
        items = [Evidence(number=n, paper_id="cited", locator=str(chunk.locator), text=chunk.text)
                 for n, chunk in enumerate(chunks, start=1)]  # fmt: skip
        answer = answer_with(items, [Claim(text="5 g", citations=[1, 2])])
        checked = validate_answer(answer, opened)
    assert [item.text for item in checked.evidence] == ["Controls gained 5 g."]
    assert any("[2] is a reference-list entry" in why for why in checked.rejections)


def test_a_table_keeps_only_the_rows_whose_numbers_their_passages_state(store):
    rows = [["Controls", "5 g [1]"], ["Mice", "7 g [1]"]]  # the passage says the mice gained 12 g
    claims = [Claim(text=" | ".join(row), citations=[1]) for row in rows]
    table = answer_with([evidence_for(store)], claims, format="table", table=[["group", "gain"], *rows])
    checked = validate_answer(table, store)
    assert checked.table == [["group", "gain"], ["Controls", "5 g"]] and checked.text == "Controls | 5 g"
    assert checked.dropped_claims == 1 and checked.supported
