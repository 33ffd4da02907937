"""benchmarks/signal_fusion.py's sentence signal: a paper scores its best sentence's cosine with the query."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmark_support import BENCHMARKS, load_benchmark


def test_a_paper_scores_its_best_sentence_and_a_paper_without_sentences_none(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling corank.py
    signal_fusion = load_benchmark("signal_fusion")
    path = tmp_path / "sentences.npz"
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    np.savez(path, vectors=vectors, owners=np.array(["a", "a", "b"]))
    sentences = signal_fusion.SentenceVectors(None, path)  # a saved file is read, the corpus not
    b, a, c = sentences.best(np.array([0.0, 1.0], dtype=np.float32), ["b", "a", "c"])
    assert (round(b, 6), a, c) == (0.8, 1.0, None)
