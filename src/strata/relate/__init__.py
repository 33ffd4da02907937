"""Lit3R Relate: paper-to-paper expansion of a retrieval run into the candidates the reader gets."""

from strata.relate.candidates import CandidateSet, expand_and_fuse
from strata.relate.expand import Expansion, Relater, SignalList, round_robin

__all__ = ["CandidateSet", "Expansion", "Relater", "SignalList", "expand_and_fuse", "round_robin"]
