"""`strata mcp` over stdio, driven by the MCP SDK's own client: tools are listed and answer over a real corpus."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from serve_support import build_corpus

KCNJ11 = "10.1007_s00125-024-06103-w"


async def _session(home: Path) -> dict:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "strata.cli", "mcp", "--store.home", str(home), "--index.dense", "false"],
    )
    async with Client(server, read_timeout_seconds=120) as client:
        tools = await client.list_tools()
        return {
            "tools": {tool.name: tool for tool in tools.tools},
            "search": await client.call_tool("search", {"query": "KCNJ11 sulfonylurea-sensitive diabetes", "k": 2}),
            "toc": await client.call_tool("toc", {"paper_id": KCNJ11}),
            "section": await client.call_tool("read_section", {"paper_id": KCNJ11, "section_path": ["Introduction"]}),
            "missing": await client.call_tool("read_section", {"paper_id": KCNJ11, "section_path": ["Nowhere"]}),
            "one_option": await client.call_tool("ask", {"question": "Which?", "options": ["A"], "format": "mc"}),
            "long_option": await client.call_tool("ask", {"question": "Which?", "options": ["A", "B" * 1001]}),
            "as_text": await client.call_tool("ask", {"question": "Which?", "options": ["A", "B"], "format": "text"}),
        }


@pytest.fixture(scope="module")
def session(tmp_path_factory, shared_data: Path) -> dict:
    return anyio.run(_session, build_corpus(tmp_path_factory.getbasetemp(), shared_data))


def test_the_four_tools_are_listed_with_their_inputs(session: dict) -> None:
    tools = session["tools"]
    assert set(tools) == {"search", "ask", "toc", "read_section"}
    assert tools["search"].input_schema["required"] == ["query"]
    assert set(tools["read_section"].input_schema["required"]) == {"paper_id", "section_path"}
    assert tools["ask"].description and "evidence" in tools["ask"].description


def test_search_returns_a_ranking_with_locators(session: dict) -> None:
    result = session["search"]
    assert not result.is_error
    ranking = result.structured_content
    assert ranking["method"].startswith("bm25")  # the corpus has no dense index
    assert ranking["candidates"][0]["paper_id"] == KCNJ11
    hit = ranking["candidates"][0]["chunks"][0]
    assert hit["locator"]["paper_id"] == KCNJ11 and hit["locator"]["char_end"] > hit["locator"]["char_start"]


def test_toc_and_read_section_walk_a_paper(session: dict) -> None:
    toc = session["toc"].structured_content
    assert "Introduction" in [section["title"] for section in toc["sections"]] and toc["answer"] is None
    section = session["section"].structured_content
    assert section["section_path"] == ["Introduction"] and len(section["text"]) > 200
    assert section["locator"].startswith(f"{KCNJ11}#")
    missing = session["missing"]
    assert missing.is_error and "Nowhere" in missing.content[0].text and "Introduction" in missing.content[0].text


def test_ask_refuses_options_http_would_refuse_before_loading_anything(session: dict) -> None:
    assert session["one_option"].is_error and "at least two options" in session["one_option"].content[0].text
    assert session["long_option"].is_error and "1 to 1000 characters" in session["long_option"].content[0].text
    assert session["as_text"].is_error and "leave the format out" in session["as_text"].content[0].text
