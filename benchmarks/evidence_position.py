"""Where the evidence stands in a SciFact abstract, and how much of it a reranker reading windows sees.

    python benchmarks/evidence_position.py [--words 80 120] [--windows 1 2 3 4 6]

SciFact's original release marks, for each train claim, the rationale sentences of each abstract that supports or
contradicts it. For every (claim, abstract) pair with rationales, this counts where the first rationale sentence
starts (in words of the abstract, as BEIR joins its sentences), and for each reranker reading (`--words` words a
window, up to `--windows` windows placed as `strata.rerank.texts.window_starts` places them) the share of pairs
where at least one rationale sentence starts inside a window read: the evidence a cross-encoder can see
(counted in words; a model's max length may cut a window's last word pieces). Train claims only:
they chose `rerank.cross_encoder_windows`, and test claims choose nothing. No model, no LLM: seconds.

Writes benchmarks/results/evidence_position.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from strata.eval.results import DatasetRef, Experiment, new_result, repo_relative, write_result
from strata.rerank.texts import window_starts

ROOT = Path(__file__).resolve().parent
ORIGINAL = ROOT.parent.parent / "shared" / "data" / "scifact" / "original"
THRESHOLDS = (90, 120, 180, 240)  # "the first rationale starts at or after word N" shares reported


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ORIGINAL, help="SciFact's original release (claims, corpus)")
    parser.add_argument("--words", type=int, nargs="+", default=[80, 120], help="words per window")
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 2, 3, 4, 6], help="windows read per paper")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "evidence_position.json")
    return parser.parse_args()


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def sentence_starts(abstract: list[str]) -> list[int]:
    """The word offset where each sentence starts, counting words as BEIR's text has them (sentences stripped and
    joined by spaces)."""
    starts, offset = [], 0
    for sentence in abstract:
        starts.append(offset)
        offset += len(sentence.split())
    return starts


def evidence_pairs(data: Path) -> list[tuple[list[int], int]]:
    """(start words of the rationale sentences, abstract length in words) per (train claim, abstract) pair."""
    corpus = {str(doc["doc_id"]): doc["abstract"] for doc in read_jsonl(data / "corpus.jsonl")}
    pairs = []
    for claim in read_jsonl(data / "claims_train.jsonl"):
        for doc_id, sets in claim["evidence"].items():
            starts = sentence_starts(corpus[doc_id])
            rationale = sorted({starts[index] for evidence in sets for index in evidence["sentences"]})
            pairs.append((rationale, sum(len(sentence.split()) for sentence in corpus[doc_id])))
    return pairs


def seen_share(pairs: list[tuple[list[int], int]], words: int, windows: int) -> float:
    """Share of pairs with a rationale sentence starting inside one of the windows read."""
    seen = 0
    for rationale, length in pairs:
        spans = [(start, start + words) for start in window_starts(length, words, windows)]
        seen += any(low <= offset < high for offset in rationale for low, high in spans)
    return seen / len(pairs)


def main() -> None:
    args = arguments()
    pairs = evidence_pairs(args.data)
    first = np.array([rationale[0] for rationale, _ in pairs])
    lengths = np.array([length for _, length in pairs])
    experiments = [
        Experiment(name=f"{windows} x {words} words", method="windows read", dataset="scifact", subset="train",
                   queries=len(pairs), metrics={"rationale_seen": round(seen_share(pairs, words, windows), 4)},
                   details={"words": words, "windows": windows})
        for words in args.words for windows in args.windows
    ]  # fmt: skip
    details = {
        "pairs": len(pairs),
        "abstract_words": {"median": float(np.median(lengths)), "p90": float(np.percentile(lengths, 90))},
        "first_rationale_word": {"median": float(np.median(first))},
        "first_rationale_at_or_after": {str(word): round(float(np.mean(first >= word)), 4) for word in THRESHOLDS},
    }
    result = new_result("benchmarks/evidence_position.py", experiments, details=details, datasets=[
        DatasetRef(name="scifact", path=repo_relative(args.data, ROOT.parent), split="train")])
    write_result(result, args.output)
    print(json.dumps(details))
    for experiment in experiments:
        print(f"{experiment.name:>18}: {experiment.metrics['rationale_seen']:.3f} of {len(pairs)} pairs")


if __name__ == "__main__":
    main()
