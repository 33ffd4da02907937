"""Chat-formatted token ids of the ToC prompts and their answers, for the transformers path (STAIR: instructions +
ToC + query -> leaf; DSI: query -> leaf), and the trie of a document's leaf labels in those tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from strata.config import TocSettings
from strata.llm import Prompt
from strata.toc.model import DocumentToc, TocEntry, toc_prompts
from strata.toc.tree import render_toc
from strata.toc.trie import LabelTrie

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Mode = Literal["stair", "dsi"]
PROMPTS: dict[Mode, str] = {"stair": "toc_select", "dsi": "toc_dsi"}
QUERY_MARK = "\ue000"  # a private-use character standing for the question, to find where it starts


def check_toc_fits(paper_id: str, toc_tokens: int, settings: TocSettings) -> None:
    """Refuse a ToC longer than the context leaves for it, naming the limit and what to change.

    The STAIR adapter is trained and queried on the whole ToC in one prompt (the zero-shot path instead shows a long
    ToC level by level or in windows, `strata.toc.tree.plan_views`)."""
    reserve = settings.answer_reserve_tokens
    budget = settings.context_tokens - reserve
    if toc_tokens <= budget:
        return
    needed = -(-(toc_tokens + reserve) // 1024) * 1024
    raise ValueError(
        f"{paper_id}: the ToC is {toc_tokens} tokens, more than the {budget} that toc.context_tokens "
        f"({settings.context_tokens}) leaves after toc.answer_reserve_tokens ({reserve}); the STAIR adapter reads "
        f"the whole ToC in one prompt, so raise toc.context_tokens to at least {needed} (e.g. "
        f"--toc.context_tokens {needed}, within what the base model supports) or use a smaller document"
    )


class Example(BaseModel):
    """One prompt with its gold leaf, tokenised."""

    paper_id: str
    leaf: str
    prompt_ids: list[int]
    answer_ids: list[int] = Field(description="Label tokens followed by the end token")
    query_start: int = Field(description="Tokens before the question: the prompt's part shared by the document")


class PromptEncoder:
    """Chat-formatted token ids of ToC prompts and answers for one tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, settings: TocSettings) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.registry = toc_prompts()
        self.end_token = int(tokenizer.eos_token_id)
        self._toc_text: dict[str, str] = {}
        self._prefixes: dict[tuple[Mode, str], list[int]] = {}

    def prompt(self, mode: Mode, toc: DocumentToc, query: str) -> Prompt:
        book = toc.title or toc.paper_id
        if mode == "dsi":
            return self.registry.render(PROMPTS[mode], book=book, query=query)
        return self.registry.render(PROMPTS[mode], book=book, toc=self.toc_text(toc), query=query)

    def toc_text(self, toc: DocumentToc) -> str:
        if toc.paper_id not in self._toc_text:
            text = render_toc(toc)
            size = len(self.tokenizer(text, add_special_tokens=False).input_ids)
            check_toc_fits(toc.paper_id, size, self.settings)
            self._toc_text[toc.paper_id] = text
        return self._toc_text[toc.paper_id]

    def query_prefix(self, mode: Mode, toc: DocumentToc) -> list[int]:
        """The token ids every `mode` prompt on `toc` begins with: all before the question (instructions, book and,
        for STAIR, the ToC). The chat text is cut where the question starts, before the space that tokenizers
        join to the question's first word, so every prompt's ids continue these."""
        key = (mode, toc.paper_id)
        if key not in self._prefixes:
            text = self.chat_text(self.prompt(mode, toc, QUERY_MARK))
            self._prefixes[key] = self.text_ids(text[: text.index(QUERY_MARK)].rstrip(" "))
        return self._prefixes[key]

    def chat_text(self, prompt: Prompt) -> str:
        messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert isinstance(text, str)  # tokenize=False renders the text
        return text

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        return self.text_ids(self.chat_text(prompt))

    def text_ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def answer_ids(self, entry: TocEntry) -> list[int]:
        return [*self.text_ids(entry.answer), self.end_token]

    def example(self, mode: Mode, toc: DocumentToc, leaf: TocEntry, query: str) -> Example:
        return Example(
            paper_id=toc.paper_id,
            leaf=leaf.number,
            prompt_ids=self.prompt_ids(self.prompt(mode, toc, query)),
            answer_ids=self.answer_ids(leaf),
            query_start=len(self.query_prefix(mode, toc)),
        )

    def trie(self, toc: DocumentToc) -> LabelTrie:
        leaves = toc.leaves()
        return LabelTrie({leaf.number: self.answer_ids(leaf)[:-1] for leaf in leaves}, self.end_token)


def shared_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens all sequences begin with, keeping at least one token of each outside the prefix."""
    shortest = min(len(sequence) for sequence in sequences) - 1
    length = 0
    while length < shortest and all(sequence[length] == sequences[0][length] for sequence in sequences):
        length += 1
    return length
