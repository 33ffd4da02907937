"""Evidence-grounded option choice: options are found in the passages in any spelling of their numbers, units and
names; the choice weighs that grounding against the model; an option stated nowhere is never cited; an
'insufficient information' option wins when nothing is stated and the model is unsure; reference-list entries are
never evidence."""

from collections.abc import Sequence

import pytest

from strata.config import LLMSettings, ReadSettings
from strata.documents.model import ChunkHit, ContentType, Locator
from strata.llm import ContinuationScore, Generation, LLMClient, Scoring, Trace
from strata.read.grounding import (
    OPPOSITE,
    Grounding,
    OptionGrounding,
    ground,
    is_insufficient,
    mentions,
    negated_terms,
    statements,
)
from strata.read.local import LocalReader, is_reference_entry
from strata.read.model import Evidence, PaperReading
from strata.read.synthesize import Synthesizer, decide, grounded_evidence, grounding_decides

QUESTION = "At which temperature was the enzyme assay of the kinase run?"
OPTIONS = ["25 °C", "37 °C", "42 °C"]
INSUFFICIENT = "Insufficient information to answer the question"


@pytest.mark.parametrize(
    ("option", "passage"),
    [
        ("4.2", "Plasma levels reached 4.2 mg/ml after one hour."),
        ("4.2 mg/ml", "Plasma levels reached 4.2mg/mL after one hour."),
        ("4.2 mg/mL", "Plasma levels reached 4.20 mg/ml after one hour."),
        ("1250 cells", "We counted 1,250 cells per well."),
        ("residues 344-360", "The loop spans residues 344\u2013360 of the receptor."),
        ("residues 344–360", "The loop spans residues 344 to 360 of the receptor."),
        ("Mn2+", "Activity required Mn\u00b2\u207a in the buffer."),
        ("K548R", "The k548r mutant lost activity."),
        ("super-open state", "It shifts the equilibrium to a super open state."),
        ("Enlarged granular cells", "Cells became enlarged and granular."),
        ("decreases", "Expression decreased twofold."),
        ("12 Å", "The CDRs form a deep, 12 A\u02da pocket."),  # how PDFs print an angstrom
        ("12 Hours", "Cells were starved for 12 hours."),  # a unit that is a word: any case
        ("3.5e-4", "The rate was 0.00035 per site."),  # scientific notation is the number it spells
        ("54 years", "Mean age was 54 (SD 8) years."),  # the spread qualifies the value
    ],
)
def test_an_option_is_found_in_any_spelling_of_its_numbers_units_and_names(option, passage):
    assert mentions(option, passage)


@pytest.mark.parametrize(
    ("option", "passage", "options"),
    [
        ("4.2", "Plasma levels reached 14.2 mg/ml.", ()),  # a number inside a longer one is another number
        ("4.2", "Plasma levels reached 4.25 mg/ml.", ()),
        ("K548R", "The R548K mutant lost activity.", ("K548R", "R548K")),  # same characters, another mutation
        ("PAB1", "Deletion of PBE1 blocked growth.", ("PBE1", "PAB1")),
        ("residues 360-380", "The loop spans residues 344-360.", ("residues 344-360", "residues 360-380")),
        ("GSDME", "Cleavage of GSDMD was seen.", ("GSDMD", "GSDME")),
        ("2 Å", "A 12 Å pocket, 2 nm from the site.", ("2 Å", "12 Å")),  # its number, but not with its unit
        ("5 mW", "The laser ran at 5 MW.", ()),  # a unit symbol's case is its meaning: milli, not mega
        ("2 Å", "A current of 2 A flowed.", ()),  # ampere, not ångström
        ("12 mg", "Doses of 12 and 5 mg were given.", ()),  # the mg is the 5's
    ],
)
def test_a_similar_but_different_value_or_name_is_not_found(option, passage, options):
    assert not mentions(option, passage, options)


def test_the_passage_holding_the_question_terms_weighs_more_than_a_passing_mention():
    passages = [
        "Kinase assays were run at 37 °C for 30 minutes.",  # the assay: question terms and an option
        "Cells were stored at 42 °C before the experiment.",  # an option, but none of the question's terms
        "The kinase has two domains.",  # question terms, no option
    ]
    grounding = ground(QUESTION, OPTIONS, passages)
    by_option = {option.option: option for option in grounding.options}
    assert [option.grounded for option in grounding.options] == [False, True, True]
    assert by_option["37 °C"].passages == (0,) and by_option["42 °C"].passages == (1,)
    assert by_option["37 °C"].score > 3 * by_option["42 °C"].score
    shares = grounding.shares()
    assert shares[0] == 0 and shares[1] > 0.75 and sum(shares) == pytest.approx(1)


def test_an_option_in_the_sentence_holding_the_question_terms_beats_one_elsewhere_in_the_passage():
    passage = "Samples were kept at 42 °C. Kinase assays were run at 37 °C for 30 minutes."
    by_option = {option.option: option for option in ground(QUESTION, OPTIONS, [passage]).options}
    assert by_option["37 °C"].grounded and by_option["42 °C"].grounded
    assert by_option["37 °C"].score > 1.5 * by_option["42 °C"].score  # same passage, other sentence: SPREAD


def test_a_negated_mention_counts_for_a_negated_question_and_against_a_plain_one():
    passage = "CWC15 interacted with PAB1, PAG1 and PBA1, but not PBE1, in the nucleus."
    subunits = ["PAB1", "PAG1", "PBA1", "PBE1"]
    negated = ground("Which subunit has CWC15 not been shown to interact with?", subunits, [passage]).shares()
    assert max(range(4), key=negated.__getitem__) == 3 and negated[3] > 2 * negated[0]
    plain = ground("Which subunit did CWC15 interact with?", subunits, [passage]).shares()
    assert plain[3] < plain[0] == plain[1] == plain[2]
    # 'except X' negates the question's subject: that sentence's option loses to the one stated of X plainly.
    variants = ["All variants except A456V increased conversion to the closed state.",
                "Consistently, A456V shifted the equilibrium towards the super-open state."]
    changes = ["Increase conversion to closed state", "Shift equilibrium to super-open state"]
    shares = ground("What structural change does the A456V mutation cause?", changes, variants).shares()
    assert shares[1] > 2 * shares[0]
    assert negated_terms("CWC15 did not bind PAB1, but bound PBE1") == {"bind", "pab1"}  # 'but' ends the scope


def test_a_figure_or_citation_mark_does_not_cut_the_sentence_stating_the_option():
    """'(Fig. 3B)' and 'et al.' end no sentence (the quoting's own sentence cuts): the option keeps the question's
    terms it shares a sentence with, and scores as it would without the mark."""
    question = "Which gene is upregulated in knockout lines?"
    passages = ["In knockout lines (Fig. 3B) ABC1 was upregulated, as Smith et al. (2019) found.",
                "In knockout lines XYZ9 was upregulated, as others found."]  # fmt: skip
    shares = ground(question, ["ABC1", "XYZ9"], passages).shares()
    assert shares[0] == pytest.approx(shares[1])
    assert statements("Knockout lines grew; ABC1 was upregulated; and so on.") == [
        "Knockout lines grew;", "ABC1 was upregulated; and so on."]  # a semicolon before a new statement parts two


def test_an_option_stating_a_negation_is_grounded_only_where_the_passage_negates_it_too():
    question = "Does fine-tuning give a larger gain for the small or the large protein models?"
    options = ["The gain is similar for all models", "There is no gain for any model", "The large models"]
    naming = ["Fine-tuning any model gained substantially; the gains were similar for all models."]
    shares = ground(question, options, naming).shares()
    assert shares[0] > 2 * shares[1]  # 'any model gained' names the option's word and says the opposite
    denying = ["Fine-tuning did not gain anything for any model we tried."]
    assert ground(question, options, denying).shares()[1] > 0.5


def test_a_negated_question_no_passage_answers_in_its_polarity_is_answered_by_elimination():
    passages = ["Knockout lines upregulated the catabolic genes KAT1, KAT4 and UGT9. MYB7 was lower in them.",
                "KAT1 was upregulated twice as strongly as the other catabolic genes in knockout lines."]
    genes = ["KAT4", "MYB7", "UGT9", "KAT1"]
    shares = ground("Which catabolic gene is not upregulated in knockout lines?", genes, passages).shares()
    assert max(range(4), key=shares.__getitem__) == 1  # stated with the question's terms least: the others are
    assert shares[0] == shares[2] == shares[3] == 0  # stated as upregulated: eliminated
    plain = ground("Which catabolic gene is upregulated in knockout lines?", genes, passages).shares()
    assert min(range(4), key=plain.__getitem__) == 1 and plain[1] > 0
    # An option nowhere in the evidence is never chosen by elimination: nothing could be cited for it.
    unseen = ground("Which catabolic gene is not upregulated in knockout lines?", [*genes, "NCED3"], passages)
    assert not unseen.options[4].grounded and unseen.shares()[4] == 0


@pytest.mark.parametrize(
    "option",
    [INSUFFICIENT, "Not enough information", "Cannot be determined from the data", "Unknown", "Unable to answer"],
)
def test_insufficient_information_options_are_recognised_by_generic_wording(option):
    assert is_insufficient(option)
    grounding = ground("Is it known?", ["yes", option], [f"{option}. Yes."])
    assert not grounding.options[1].grounded  # such an option states nothing the evidence could hold


@pytest.mark.parametrize("option", ["The unknown gene", "Insulin", "no change", "It cannot bind ATP"])
def test_ordinary_options_are_not_taken_for_insufficient_information(option):
    assert not is_insufficient(option)


def grounding_of(scores: Sequence[float]) -> list[float]:
    """The grounding shares `decide` weighs, of options scoring `scores`."""
    return Grounding(
        tuple(OptionGrounding(f"o{i}", float(s > 0), s, (0,) if s else ()) for i, s in enumerate(scores))
    ).shares()


def test_insufficient_information_wins_only_when_nothing_is_stated_and_the_model_is_unsure():
    options = ["5 g", "7 g", INSUFFICIENT]
    settings = ReadSettings(insufficient_below=0.6)
    nothing = grounding_of([0, 0, 0])
    assert decide(options, nothing, [0.5, 0.3, 0.2], settings) == 2  # unsure model
    assert decide(options, nothing, [0.1, 0.8, 0.1], settings) == 1  # confident model
    assert decide(options, nothing, None, settings) == 2  # grounding alone: nothing found
    assert decide(options, grounding_of([0, 0.4, 0]), [0.5, 0.3, 0.2], settings) == 1  # an option is stated
    assert decide(["5 g", "7 g"], grounding_of([0, 0]), None, settings) is None  # nothing to choose with


def test_the_grounding_weight_trades_the_evidence_against_the_model():
    options = ["5 g", "7 g"]
    stated, model = grounding_of([0.9, 0.1]), [0.2, 0.8]
    assert decide(options, stated, model, ReadSettings(grounding_weight=0.0)) == 1
    assert decide(options, stated, model, ReadSettings(grounding_weight=1.0)) == 0
    assert decide(options, stated, model, ReadSettings(grounding_weight=0.5)) == 0  # 0.55 against 0.45


class LetterBackend:
    """Prefers one option's letter whatever the evidence says; records every prompt it scores."""

    name = "letters"
    model = "letters-1"
    load_seconds = None

    def __init__(self, favourite: str, strength: float = 3.0) -> None:
        self.favourite = favourite
        self.strength = strength
        self.prompts: list[str] = []

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        self.prompts.append(user)
        favoured = next((line[0] for line in user.splitlines() if line.endswith(f". {self.favourite}")), "")
        scores = [ContinuationScore(continuation=c, logprob=0.0 if c == favoured else -self.strength, n_tokens=1)
                  for c in continuations]  # fmt: skip
        return Scoring(scores=scores, tokens_in=len(user.split()))

    def generate(self, system, user, schema, options) -> Generation:
        raise AssertionError("a multiple-choice answer generates nothing")

    def close(self) -> None:
        pass


def evidence(*texts: str) -> list[Evidence]:
    return [Evidence(number=n, paper_id="p", locator=f"p#{n}-{n + 1}", text=t) for n, t in enumerate(texts, start=1)]


ASSAY = evidence("Cells were stored at 42 °C overnight.", "Kinase assays were run at 37 °C for 30 minutes.")


def synthesizer(backend: LetterBackend, **settings) -> Synthesizer:
    return Synthesizer(LLMClient(backend, LLMSettings(cache=False)), ReadSettings(**settings))


def test_grounding_alone_asks_the_model_nothing_and_cites_the_passage_stating_the_option():
    backend = LetterBackend("42 °C")
    answer = synthesizer(backend, choice="grounding")._choose(QUESTION, OPTIONS, ASSAY, Trace())
    assert backend.prompts == []
    assert answer.choice == "37 °C" and answer.claims[0].citations == [2]


def test_a_confident_model_can_outvote_the_grounding_but_its_option_cites_only_passages_stating_it():
    backend = LetterBackend("25 °C", strength=8.0)  # an option stated nowhere
    answer = synthesizer(backend, choice="letter", grounding_weight=0.3)._choose(QUESTION, OPTIONS, ASSAY, Trace())
    assert len(backend.prompts) == 1  # one letter prompt (read.letter_orders), no citation call
    assert answer.choice == "25 °C" and answer.claims[0].citations == []
    grounded = synthesizer(LetterBackend("25 °C", strength=8.0), grounding_weight=0.8)
    assert grounded._choose(QUESTION, OPTIONS, ASSAY, Trace()).choice == "37 °C"


def test_insufficient_information_is_chosen_when_no_option_is_stated_and_the_model_is_unsure():
    options = [*OPTIONS, INSUFFICIENT]
    unrelated = evidence("The kinase has two domains.")
    unsure = synthesizer(LetterBackend("25 °C", strength=0.2), insufficient_below=0.5)
    answer = unsure._choose(QUESTION, options, unrelated, Trace())
    assert answer.choice == INSUFFICIENT and not answer.answerable and answer.claims == []
    sure = synthesizer(LetterBackend("25 °C", strength=8.0), insufficient_below=0.5)
    assert sure._choose(QUESTION, options, unrelated, Trace()).choice == "25 °C"


def test_the_model_is_not_asked_when_its_share_cannot_change_the_choice():
    """One option stated and no other: at a grounding weight of 0.5 even a model sure of another option only ties,
    so its calls are saved; below 0.5, or with two options stated, the model is asked."""
    stated_once = evidence("Kinase assays were run at 37 °C for 30 minutes.")
    backend = LetterBackend("25 °C", strength=8.0)
    answer = synthesizer(backend, grounding_weight=0.5)._choose(QUESTION, OPTIONS, stated_once, Trace())
    assert backend.prompts == [] and answer.choice == "37 °C"
    assert all(score.model is None for score in answer.option_scores)
    lower = LetterBackend("25 °C", strength=8.0)
    assert synthesizer(lower, grounding_weight=0.4)._choose(QUESTION, OPTIONS, stated_once, Trace()).choice == "25 °C"
    both = LetterBackend("42 °C")
    synthesizer(both, grounding_weight=0.5)._choose(QUESTION, OPTIONS, ASSAY, Trace())
    assert len(both.prompts) == 1
    assert grounding_decides([1.0, 0.0, 0.0], 0.5) and not grounding_decides([0.9, 0.1, 0.0], 0.5)
    assert not grounding_decides([0.0, 0.0], 1.0)  # nothing stated: the model (or 'insufficient') decides


def test_an_option_stated_only_against_the_question_does_not_take_the_whole_share():
    """'ABC1 was not upregulated' is no evidence that ABC1 is the gene upregulated: found nowhere else, it keeps the
    opposite polarity's fraction of a share, so the grounding cannot decide alone and the model is asked."""
    genes = ["ABC1", "XYZ9", "KLM4"]
    denied = evidence("Under hypoxia ABC1 was not upregulated in the cells.")
    shares = ground("Which gene is upregulated by hypoxia?", genes, [denied[0].text]).shares()
    assert shares[0] == pytest.approx(OPPOSITE) and shares[1] == shares[2] == 0
    backend = LetterBackend("KLM4", strength=8.0)
    answer = synthesizer(backend, grounding_weight=0.5)._choose("Which gene is upregulated by hypoxia?", genes, denied,
                                                               Trace())  # fmt: skip
    assert len(backend.prompts) == 1 and answer.choice == "KLM4"
    stated = ground("Which gene is upregulated by hypoxia?", genes, ["Under hypoxia ABC1 was upregulated."]).shares()
    assert stated == [1.0, 0.0, 0.0]  # stated as asked: the whole share, as before


class PositionBiasedBackend(LetterBackend):
    """Likes the letter 'A' a little more than the letter of its favourite option, wherever that one is listed."""

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        self.prompts.append(user)
        favoured = next(line[0] for line in user.splitlines() if line.endswith(f". {self.favourite}"))
        table = {"A": -0.1, favoured: -0.2} if favoured != "A" else {"A": -0.1}
        scores = [ContinuationScore(continuation=c, logprob=table.get(c, -2.0), n_tokens=1) for c in continuations]
        return Scoring(scores=scores, tokens_in=len(user.split()))


def test_every_cyclic_order_cancels_a_position_bias_one_order_does_not():
    nothing = evidence("The kinase has two domains.")  # no option stated: the model alone decides
    one = PositionBiasedBackend("37 °C")
    assert synthesizer(one, letter_orders=1)._choose(QUESTION, OPTIONS, nothing, Trace()).choice == "25 °C"  # 'A'
    assert len(one.prompts) == 1
    every = PositionBiasedBackend("37 °C")
    answer = synthesizer(every, letter_orders=0)._choose(QUESTION, OPTIONS, nothing, Trace())
    assert answer.choice == "37 °C" and len(every.prompts) == len(OPTIONS)
    model = [score.model for score in answer.option_scores]
    assert model[0] == pytest.approx(model[2])  # the two others each sat at 'A' once


def test_the_deciding_model_is_shown_the_sentences_about_the_question_and_options():
    padded = evidence("The kinase was purified from yeast. Cells grew in rich medium. Assays were run at 37 °C. "
                      "Results were replicated twice.", "Cells were stored at 42 °C overnight.")  # fmt: skip
    backend = LetterBackend("37 °C")
    answer = synthesizer(backend, shown_sentences=1)._choose(QUESTION, OPTIONS, padded, Trace())
    shown = backend.prompts[0]
    assert "Assays were run at 37 °C." in shown and "Cells grew in rich medium" not in shown
    assert answer.evidence[0].text == padded[0].text  # the answer keeps whole passages; only the prompt is cut
    whole = LetterBackend("37 °C")
    synthesizer(whole)._choose(QUESTION, OPTIONS, padded, Trace())
    assert "Cells grew in rich medium" in whole.prompts[0]


def hit(text: str, start: int, content_type: ContentType = ContentType.TEXT, section: str = "Results") -> ChunkHit:
    locator = Locator(paper_id="p", char_start=start, char_end=start + len(text), section_path=(section,))
    return ChunkHit(rowid=start, text=text, content_type=content_type, locator=locator, score=1.0)


def test_the_model_is_shown_the_passage_stating_an_option_even_if_the_reader_picked_another():
    picked, stating = hit("The kinase has two domains.", 0), hit("Kinase assays were run at 37 °C.", 100)
    reading = PaperReading(paper_id="p", rank=1, relevant=1, sufficient=1, accepted=True, passages=[picked],
                           shown=[picked, stating])  # fmt: skip
    shown = grounded_evidence(QUESTION, OPTIONS, [reading], limit=2)
    assert [item.text for item in shown] == [stating.text, picked.text]  # the stating passage first
    assert grounded_evidence(QUESTION, OPTIONS, [reading], limit=1)[0].text == stating.text


def test_reference_list_entries_are_never_shown_to_the_reader_nor_made_evidence():
    entry = hit("Smith J. Kinase assays at 42 °C. J Biol 2020;12:1-9.", 0, ContentType.REFERENCE)
    untyped = hit("Lee K. Assays of kinases at 42 °C. Nature 2019.", 80, section="References")
    finding = hit("Kinase assays were run at 37 °C.", 200)
    assert is_reference_entry(entry) and is_reference_entry(untyped) and not is_reference_entry(finding)
    reading = PaperReading(paper_id="p", rank=1, relevant=1, sufficient=1, accepted=True, passages=[entry, finding],
                           shown=[entry, untyped, finding])  # fmt: skip
    shown = grounded_evidence(QUESTION, OPTIONS, [reading], limit=5)
    assert [item.text for item in shown] == [finding.text]


class YesBackend(LetterBackend):
    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        self.prompts.append(user)
        scores = [ContinuationScore(continuation=c, logprob=0.0 if c in ("yes", "Yes", "1") else -5.0, n_tokens=1)
                  for c in continuations]  # fmt: skip
        return Scoring(scores=scores, tokens_in=len(user.split()))


def test_the_local_reader_drops_reference_entries_before_reading():
    from strata.documents.model import Candidate

    backend = YesBackend("")
    reader = LocalReader(LLMClient(backend, LLMSettings(cache=False)), ReadSettings())
    entry = hit("Smith J. Kinase assays at 42 °C. J Biol 2020.", 0, ContentType.REFERENCE)
    finding = hit("Kinase assays were run at 37 °C.", 200)
    reading = reader.read(QUESTION, Candidate(paper_id="p", score=1, rank=1), [entry, finding], Trace())
    assert reading.accepted and reading.shown == [finding] and reading.passages == [finding]
    assert all("Smith J." not in prompt for prompt in backend.prompts)


def test_a_multiple_choice_reading_cites_every_passage_shown_without_asking_which():
    from strata.documents.model import Candidate

    backend = YesBackend("")
    reader = LocalReader(LLMClient(backend, LLMSettings(cache=False)), ReadSettings())
    passages = [hit("Kinase assays were run at 37 °C.", 0), hit("Assays at 42 °C failed.", 200)]
    candidate = Candidate(paper_id="p", score=1, rank=1)
    chosen = reader.read(QUESTION, candidate, passages, Trace())
    asked = len(backend.prompts)
    unchosen = reader.read(QUESTION, candidate, passages, Trace(), choose=False)
    assert chosen.passages == passages[:1]  # the model named passage 1 (its second share is below the minimum)
    assert unchosen.accepted and unchosen.passages == passages
    assert asked == 3 and len(backend.prompts) - asked == 2  # Decisions A and B only: no 'which passage' call


VERDICT_QUESTION = "Is the following claim supported or refuted by the literature? Kinase assays run at 37 °C."
VERDICTS = ["The claim is supported.", "The claim is refuted."]


def test_a_verdict_option_is_never_grounded_on_a_passage_that_merely_uses_its_word():
    """'supported' restates the question's own alternative: a passage saying 'supported by grants' states neither."""
    stated = evidence("This work was supported by a grant. Kinase assays were run at 37 °C.")
    grounding = ground(VERDICT_QUESTION, VERDICTS, [item.text for item in stated])
    assert not grounding.any_grounded
    assert ground(QUESTION, OPTIONS, [item.text for item in ASSAY]).any_grounded  # content options still are


def test_a_verdict_is_decided_by_the_model_and_cites_the_first_papers_passages_through_validation(tmp_path):
    from strata.read.validate import validate_answer

    stated = [*evidence("Kinase assays were run at 37 °C.", "Assays at 37 °C were repeated."),
              Evidence(number=3, paper_id="q", locator="q#0-5", text="Other work.")]
    backend = LetterBackend("The claim is refuted.")
    answer = synthesizer(backend, grounding_weight=0.5)._choose(VERDICT_QUESTION, VERDICTS, stated, Trace())
    assert answer.choice == "The claim is refuted." and answer.claims[0].citations == [1, 2]  # paper p's, not q's

    class Store:  # every cited passage exists as given
        def has_paper(self, paper_id):
            return True

        def locate(self, locator):
            text = next(item.text for item in stated if item.locator == str(locator))
            return locator, text

        def paper_summaries(self, ids):
            return {paper_id: type("Summary", (), {"title": paper_id}) for paper_id in ids}

    checked = validate_answer(answer, Store(), VERDICTS)
    assert checked.supported and checked.claims[0].citations == [1, 2]  # no passage words the verdict: kept


def test_a_name_with_digits_compares_in_any_case_a_unit_after_a_number_does_not():
    from strata.read.grounding import fine_tokens

    assert fine_tokens("K548R") == fine_tokens("k548r") and fine_tokens("IL-17A") == fine_tokens("IL-17a")
    assert fine_tokens("5 mW") != fine_tokens("5 MW") and fine_tokens("5mW") == fine_tokens("5 mW")


def test_options_with_citation_marks_are_grounded_on_their_words():
    marked = [f"{option} [{n}]" for n, option in enumerate(OPTIONS, start=2)]  # '[3]' is no number the option states
    answer = synthesizer(LetterBackend("42 °C"), choice="grounding")._choose(QUESTION, marked, ASSAY, Trace())
    assert answer.choice == "37 °C [3]" and answer.claims[0].citations == [2]


def test_an_option_chosen_by_elimination_cites_the_passage_stating_it():
    from strata.read.synthesize import citing

    passages = ["Under hypoxia ABC1 was strongly upregulated in the cells.", "XYZ9 expression was measured in cells.",
                "Hypoxia upregulated KLM4 too."]  # fmt: skip
    grounding = ground("Which gene is not upregulated by hypoxia?", ["ABC1", "XYZ9", "KLM4"], passages)
    assert grounding.shares() == [0.0, 1.0, 0.0] and citing(grounding.options[1]) == [1]
