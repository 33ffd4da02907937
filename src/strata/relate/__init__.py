"""Lit3R Relate: paper-to-paper expansion, and `find_candidates`, the retriever the reader calls."""

from strata.relate.candidates import CandidateSet, expand_and_fuse, find_candidates
from strata.relate.expand import Expansion, Relater, SignalList, round_robin

__all__ = ["CandidateSet", "Expansion", "Relater", "SignalList", "expand_and_fuse", "find_candidates", "round_robin"]
