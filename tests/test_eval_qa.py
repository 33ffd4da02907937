"""`strata eval qa`: metrics of answers against LitQA2 gold and SciFact rationales, on a fake pipeline."""

import json
from contextlib import contextmanager

import pytest

from strata.cli import build_parser, settings_from_args
from strata.documents.model import Ranking
from strata.eval import qa
from strata.eval.datasets import EvalQuery, Rationale
from strata.eval.results import load_result
from strata.read.model import Answer, AskResult, Claim, Evidence, PaperReading


def evidence(paper_id: str, text: str, quote: str = "", number: int = 1) -> Evidence:
    return Evidence(number=number, paper_id=paper_id, locator=f"{paper_id}#0-{len(text)}", text=text, quote=quote)


def result_for(question: str, choice: str | None, cited: list[Evidence], read: list[str]) -> AskResult:
    answer = Answer(
        question=question,
        format="mc" if choice else "text",
        text=choice or "x",
        choice=choice,
        claims=[Claim(text="x", citations=[item.number for item in cited])] if cited else [],
        evidence=cited,
    )
    readings = [PaperReading(paper_id=p, rank=i, relevant=1.0, accepted=True) for i, p in enumerate(read, start=1)]
    return AskResult(answer=answer, candidates=Ranking(query=question, method="fake"), readings=readings)


def test_evidence_overlap_is_the_share_of_key_passage_terms_cited():
    key = ["Exon methylation was highly similar to intron."]
    assert qa.evidence_overlap([evidence("p", "Methylation of exons and introns was highly similar.")], key) == 1.0
    assert qa.evidence_overlap([evidence("p", "Unrelated galaxies.")], key) == 0.0
    assert qa.evidence_overlap([], key) == 0.0


def test_sentence_metrics_match_quoted_sentences_to_rationales_of_the_same_paper():
    query = EvalQuery(id="c", text="claim", gold_papers={"d": 1}, rationales=[
        Rationale(paper_id="d", sentence_ids=[1, 2], label="SUPPORT", sentences=["B is high.", "C is low."])
    ])
    quoted_d = evidence("d", "A is. B is high. C is low.", "A is. B is high.")
    cited = [quoted_d, evidence("e", "B is high.", "B is high.", 2)]
    metrics = qa.query_metrics(query, result_for("claim", None, cited, ["d", "e"]), None)
    # 'A is.' is no rationale, and 'B is high.' of paper e is not paper d's sentence
    assert (metrics["sentences_predicted"], metrics["sentences_correct"]) == (3, 1)
    assert (metrics["sentences_gold"], metrics["sentences_found"]) == (2, 1)
    summary = qa.summarize([qa.QAPrediction(
        query_id="c", question="claim", answer="x", supported=True, partial=False, gold_papers=["d"], read_papers=[],
        accepted_papers=[], cited_papers=[], evidence=[], metrics=metrics, llm={}, seconds=0.0,
    )], "scifact")
    assert summary["sentence_precision"] == pytest.approx(1 / 3) and summary["sentence_recall"] == 0.5
    assert summary["sentence_f1"] == pytest.approx(0.4)


def test_options_are_shuffled_the_same_way_every_time():
    query = EvalQuery(id="q1", text="?", options=["right", "w1", "w2", "w3", "w4"], correct_option=0)
    first = qa.shuffled_options(query)
    assert first == qa.shuffled_options(query) and sorted(first) == sorted(query.options)


def test_eval_qa_on_litqa2_scores_answers_and_writes_predictions(shared_data, tmp_path, monkeypatch):
    """The real LitQA2 questions through `strata eval qa`, answered by a fake pipeline that answers the first two
    right (citing the gold paper), the third wrong, and abstains on the rest."""
    asked = []

    class FakePipeline:
        class client:  # noqa: N801  (stands in for the LLMClient attribute)
            model = "fake-model"

            class backend:  # noqa: N801
                name = "fake"

        decider = client

        def ask(self, question, *, options=None, answer_format="text", on_event=None):
            record = next(r for r in records if r["question"] == question)
            asked.append(record["ideal"] in options and answer_format == "mc")
            number = len(asked)
            if number > 3:
                return result_for(question, None, [], [])
            gold = qa.load_dataset(shared_data / "litqa2").queries[number - 1]
            paper = next(iter(gold.gold_papers))
            choice = record["ideal"] if number <= 2 else record["distractors"][0]
            return result_for(question, choice, [evidence(paper, record["key-passage"])], [paper])

    @contextmanager
    def fake_open(settings):
        yield FakePipeline()

    records = [json.loads(line) for line in (shared_data / "litqa2" / "questions.jsonl").open()]
    monkeypatch.setattr("strata.pipeline.ask.open_pipeline", fake_open)
    (tmp_path / "s").mkdir()  # a store the test's fake pipeline stands for: eval qa refuses a missing one
    (tmp_path / "s" / "corpus.sqlite3").touch()
    args = build_parser().parse_args(
        ["eval", "qa", "--dataset", str(shared_data / "litqa2"), "--limit", "5", "--store", str(tmp_path / "s"),
         "--output", str(tmp_path / "out")]
    )
    result = args.evaluate(args, settings_from_args(args))
    metrics = result.metrics
    assert result.queries == 5 and result.llm_model == "fake-model"
    assert metrics["accuracy"] == pytest.approx(2 / 5) and metrics["precision"] == pytest.approx(2 / 3)
    assert metrics["coverage"] == pytest.approx(3 / 5) and metrics["cited_gold_paper"] == pytest.approx(3 / 5)
    assert metrics["evidence_overlap"] == pytest.approx(3 / 5)
    assert asked == [True] * 5  # every question asked as multiple choice with its right answer among the options
    lines = (tmp_path / "out" / "litqa2-all-qa.jsonl").read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[0])["choice"] == records[0]["ideal"]
    saved = load_result(tmp_path / "out" / "litqa2-all-qa.json")
    assert saved.experiments[0].per_query[2].metrics["correct"] == 0.0 and saved.datasets[0].fingerprint
