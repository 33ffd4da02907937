"""Lit3R Read: paper-local reading (Decisions A and B), cross-paper synthesis, citation validation, and `ask`."""

from strata.read.model import Answer, AnswerFormat, AskResult, Claim, Evidence, PaperReading, StageEvent

__all__ = ["Answer", "AnswerFormat", "AskResult", "Claim", "Evidence", "PaperReading", "StageEvent"]
