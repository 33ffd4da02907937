"""benchmarks/corank.py: a later run of other methods at the same caps adds to the earlier result."""

from __future__ import annotations

import json

from benchmark_support import BENCHMARKS, load_benchmark


def test_caps_read_back_from_a_result_file_compare_equal_to_this_runs(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    corank = load_benchmark("corank")
    ours = {"queries": 100, "overrides": [("search.fusion", "rrf")], "methods": ["corank"], "llm_threads": 2}
    read_back = json.loads(json.dumps(ours)) | {"methods": ["pointwise"], "llm_threads": 1}
    assert corank._comparable(read_back) == corank._comparable(ours)  # --set's tuples came back as lists
    assert corank._comparable({"queries": 100, "overrides": []}) == corank._comparable({"queries": 100})
    assert corank._comparable({"queries": 50}) != corank._comparable({"queries": 100})
