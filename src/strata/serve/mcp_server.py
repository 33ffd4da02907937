"""The MCP server (`strata mcp`, stdio): tools that let agent clients search, ask, and read papers by their ToC.

Stdout carries the protocol alone; everything else (logs, model loading) goes to stderr.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from strata.config import Settings
from strata.documents.model import Ranking
from strata.read.model import Answer, AnswerFormat
from strata.retrieve.hybrid import Method
from strata.serve.service import AskFunction, CorpusService, Gate, SectionText, ServiceError, TocView

T = TypeVar("T")

INSTRUCTIONS = (
    "Strata searches a corpus of scientific papers. `search` finds papers and passages (each with a locator); "
    "`ask` answers a question with numbered, validated evidence; `toc` shows a paper's table of contents (and, given "
    "a question, the sections that answer it); `read_section` returns a section's text by its ToC path."
)


def build_mcp_server(settings: Settings, ask_fn: AskFunction | None = None) -> MCPServer:
    service = CorpusService(settings, ask_fn)
    server = MCPServer("strata", instructions=INSTRUCTIONS)

    @server.tool()
    async def search(
        query: Annotated[str, Field(description="What to look for")],
        k: Annotated[int, Field(ge=1, description="Papers returned (at most serve.max_k)")] = 10,
        method: Annotated[Method, Field(description="'hybrid' (BM25 + dense), 'bm25' or 'dense'")] = "hybrid",
    ) -> Ranking:
        """Hybrid search over the corpus: papers best first, each with its best passages and their locators."""
        return await _run(lambda: service.search(query, k, method))

    @server.tool()
    async def ask(
        question: Annotated[str, Field(description="The question")],
        options: Annotated[list[str] | None, Field(description="Multiple choice: the options, verbatim")] = None,
        format: Annotated[AnswerFormat | None, Field(
            description="'text', 'mc' or 'table'; default 'mc' with options, else 'text'")] = None,
    ) -> Answer:
        """Answer a question from the corpus; every claim cites numbered evidence whose locator names exact text."""
        result = await _run(lambda: service.ask(question, options, format), service.llm_slots)
        return result.answer

    @server.tool()
    async def toc(
        paper_id: Annotated[str, Field(description="A paper id, as returned by search")],
        question: Annotated[str | None, Field(description="Optional: rank the sections that answer it")] = None,
    ) -> TocView:
        """A paper's table of contents; with a question, also the sections (leaves) that answer it."""
        return await _run(lambda: service.toc(paper_id, question), service.llm_slots if question else None)

    @server.tool()
    async def read_section(
        paper_id: Annotated[str, Field(description="A paper id")],
        section_path: Annotated[list[str], Field(description="Section titles from the top down, as in `toc`")],
    ) -> SectionText:
        """The text of one section of a paper (with its sub-sections), and the locator of that span."""
        return await _run(lambda: service.read_section(paper_id, section_path))

    return server


async def _run(work: Callable[[], T], gate: Gate | None = None) -> T:
    """Corpus work in a worker thread (the protocol keeps running), after its turn at `gate` (an LLM slot) when given;
    a client's mistake is a tool error it can read."""
    try:
        return await (gate.run(work) if gate else anyio.to_thread.run_sync(work))
    except ServiceError as error:
        raise ToolError(str(error)) from error


def run_stdio(settings: Settings, ask_fn: AskFunction | None = None) -> None:
    build_mcp_server(settings, ask_fn).run("stdio")
