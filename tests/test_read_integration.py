"""`ask` end to end with the embedded model on a tiny real store: SciFact abstracts (the gold one for a dev claim
and a few others). The model's judgement is not asserted (0.5B); the grounding guarantees are."""

import json

from strata.config import Settings
from strata.documents.model import Locator
from strata.pipeline.ingest import ingest
from strata.pipeline.ask import ask
from strata.read.validate import normalized
from strata.store import open_store

GOLD = "13734012"  # SciFact dev claim 5 cites this abstract
CLAIM = "1/2000 in UK have abnormal PrP positivity."
OTHERS = 4


def test_ask_on_real_abstracts_cites_only_validated_corpus_passages(shared_data, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    with (shared_data / "scifact" / "beir" / "corpus.jsonl").open(encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines]
    chosen = [r for r in records if r["_id"] == GOLD] + [r for r in records if r["_id"] != GOLD][:OTHERS]
    corpus.write_text("".join(json.dumps(record) + "\n" for record in chosen), encoding="utf-8")
    settings = Settings.load(
        overrides={
            "store.home": str(tmp_path / "home"),
            "index.dense": False,
            "llm.cache": False,
            "read.llm_retrieval": False,  # the reader's LLM calls are what this test is about
            "relate.enabled": False,
            "read.max_papers": 2,
        }
    )
    assert not ingest([corpus], settings).errors

    result = ask(f"What share of people in the UK have abnormal PrP positivity? ({CLAIM})", settings)

    assert not result.partial, result.error
    assert [event.stage for event in result.events][:2] == ["retrieve", "retrieve"]
    assert result.events[-1].stage == "validate" and result.events[-1].status == "done"
    assert 1 <= len(result.readings) <= 2 and result.candidates.paper_ids[0] == GOLD
    assert result.trace.summary().calls >= len(result.readings)
    answer = result.answer
    with open_store(settings) as store:
        for item in answer.evidence:
            located, text = store.locate(Locator.parse(item.locator))
            assert item.paper_id in {r["_id"] for r in chosen} and normalized(item.quote) in normalized(text)
    cited = {number for claim in answer.claims for number in claim.citations}
    assert cited == {item.number for item in answer.evidence}
    assert answer.answerable == bool(answer.claims) or not answer.supported
