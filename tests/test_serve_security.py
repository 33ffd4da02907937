"""Hostile and careless clients get clear 4xx answers: auth, loopback-only without a token, upload limits, path
traversal, malformed or oversized bodies and queries. A real uvicorn server on 127.0.0.1 over an empty store."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from serve_support import sse_events

from strata.cli import main
from strata.config import Settings
from strata.serve.app import background_server, check_bind, create_app

TOKEN = "correct-horse-battery-staple"


def _settings(home: Path, **serve: str) -> Settings:
    return Settings.load(overrides={"store.home": str(home), "index.dense": "false",
                                    **{f"serve.{name}": value for name, value in serve.items()}})


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A server with a token and small upload limits; its home lies in a folder we can inspect for escapes."""
    outside = tmp_path_factory.mktemp("outside")
    home = outside / "home"
    settings = _settings(home, token=TOKEN, max_upload_files="2", max_upload_bytes="1000", max_query_chars="50")
    with background_server(create_app(settings)) as url:
        with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            yield client, outside, home / "files"


def _files_under(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.is_file()}


def test_api_routes_need_the_token_while_page_and_health_stay_open(guarded) -> None:
    client, _, _ = guarded
    anonymous = httpx.Client(base_url=str(client.base_url), timeout=30)
    for path in ("/search?q=dna", "/papers/x", "/locate/x%230-1", "/toc/x"):
        response = anonymous.get(path)
        assert response.status_code == 401, path
        assert "bearer token" in response.json()["detail"] and response.headers["www-authenticate"] == "Bearer"
    assert anonymous.post("/ask", json={"question": "why?"}).status_code == 401
    assert anonymous.post("/ingest", data={"folder": "x"}).status_code == 401
    wrong = anonymous.get("/search", params={"q": "dna"}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert client.get("/search", params={"q": "dna"}).json()["candidates"] == []
    assert anonymous.get("/health").json()["auth"] is True
    assert anonymous.get("/").status_code == 200 and anonymous.get("/openapi.json").status_code == 200


def test_an_upload_is_refused_before_its_body_is_read_without_the_token_or_from_another_site(guarded) -> None:
    client, _, files = guarded
    anonymous = httpx.Client(base_url=str(client.base_url), timeout=30)
    body = {"files": ("paper.txt", b"x" * 900, "text/plain")}
    refused = anonymous.post("/ingest", files=body)
    assert refused.status_code == 401 and "bearer token" in refused.json()["detail"]
    cross_site = client.post("/ingest", files=body, headers={"Origin": "https://attacker.example"})
    assert cross_site.status_code == 403 and "cross-origin" in cross_site.json()["detail"]
    assert not files.exists() or not _files_under(files)  # nothing written for either
    same_site = client.post("/ask", json={"question": ""}, headers={"Origin": str(client.base_url).rstrip("/")})
    assert same_site.status_code == 422  # the page's own origin passes the guard (and meets the body check)


def test_only_a_server_with_a_token_checks_one(tmp_path: Path) -> None:
    """Without serve.token the API routes carry no auth dependency (FastAPI would solve it on every request for
    nothing), so the schema names no bearer scheme; with one, every API route needs it."""
    open_schema = create_app(_settings(tmp_path / "open")).openapi()
    guarded_schema = create_app(_settings(tmp_path / "guarded", token=TOKEN)).openapi()
    assert "securitySchemes" not in open_schema.get("components", {})
    assert "HTTPBearer" in guarded_schema["components"]["securitySchemes"]
    for path in ("/search", "/papers/{paper_id}", "/locate/{locator}", "/toc/{paper_id}", "/ask", "/ingest"):
        for operation in guarded_schema["paths"][path].values():
            assert operation["security"] == [{"HTTPBearer": []}], path
        assert all("security" not in operation for operation in open_schema["paths"][path].values()), path
    assert "security" not in guarded_schema["paths"]["/health"]["get"]


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.org"])
def test_binding_beyond_loopback_needs_a_token(tmp_path: Path, host: str) -> None:
    with pytest.raises(ValueError, match="without a token"):
        check_bind(_settings(tmp_path, host=host))
    check_bind(_settings(tmp_path, host=host, token=TOKEN))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_no_token(tmp_path: Path, host: str) -> None:
    check_bind(_settings(tmp_path, host=host))


def test_cli_refuses_to_serve_on_all_interfaces_without_a_token(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("STRATA_SERVE__TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "0", "--store.home", str(tmp_path)]) == 2
    assert "refusing to serve on 0.0.0.0 without a token" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../evil.pdf", "..", ".", "sub/evil.pdf", "..\\evil.pdf", "/tmp/evil.pdf"])
def test_upload_names_never_escape_the_storage_root(guarded, name: str) -> None:
    client, outside, root = guarded
    before = _files_under(outside)
    response = client.post("/ingest", files=[("files", (name, b"%PDF-1.4 tiny", "application/pdf"))])
    assert response.status_code == 400, response.text
    assert "file name" in response.json()["detail"] or "filename" in response.json()["detail"].lower()
    assert _files_under(outside) == before


def test_a_second_upload_of_another_file_under_a_taken_name_is_refused_and_replaces_nothing(guarded) -> None:
    client, _, root = guarded
    first = client.post("/ingest", files=[("files", ("main.pdf", b"%PDF-1.4 first", "application/pdf"))])
    assert first.status_code == 200, first.text
    again = client.post("/ingest", files=[("files", ("main.pdf", b"%PDF-1.4 first", "application/pdf"))])
    assert again.status_code == 200  # the same file again: skipped as unchanged
    other = client.post("/ingest", files=[("files", ("main.pdf", b"%PDF-1.4 other", "application/pdf"))])
    assert other.status_code == 409 and "rename the new file" in other.json()["detail"]
    assert (root / "uploads" / "main.pdf").read_bytes() == b"%PDF-1.4 first"
    assert [path.name for path in (root / "uploads").iterdir()] == ["main.pdf"]  # no temporary left behind
    long = client.post("/ingest", files=[("files", ("\u8bba" * 90 + ".pdf", b"%PDF-1.4", "application/pdf"))])
    assert long.status_code == 400 and "at most 255" in long.json()["detail"]


def _link_out(outside: Path, link: Path, name: str, text: str) -> Path:
    """A file `name` outside the storage root holding `text`, and `link` (inside it) pointing at that file."""
    target = outside / name
    target.write_text(text)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return target


def test_a_symlink_planted_in_the_upload_folder_is_not_followed(guarded) -> None:
    client, outside, root = guarded
    target = _link_out(outside, root / "uploads" / "trap.pdf", "precious.txt", "keep me")
    response = client.post("/ingest", files=[("files", ("trap.pdf", b"overwritten", "application/pdf"))])
    assert response.status_code == 400 and "outside the storage root" in response.json()["detail"]
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("folder", ["..", "../..", "/etc", "uploads/../../.."])
def test_ingest_folders_must_lie_inside_the_storage_root(guarded, folder: str) -> None:
    client, _, _ = guarded
    response = client.post("/ingest", data={"folder": folder})
    assert response.status_code == 400 and "outside the storage root" in response.json()["detail"]


def test_a_file_linking_out_of_the_storage_root_is_not_ingested_from_a_folder(guarded) -> None:
    client, outside, root = guarded
    record = '{"_id": "leak", "title": "Private notes", "text": "Not for the corpus."}\n'
    _link_out(outside, root / "linked" / "notes.jsonl", "secret.jsonl", record)
    response = client.post("/ingest", data={"folder": "linked"})
    assert response.status_code == 200 and response.json()["files"] == []
    assert client.get("/papers/leak").status_code == 404
    assert client.post("/ingest", data={"folder": "bad\x00name"}).status_code == 400


def test_upload_size_and_count_limits(guarded) -> None:
    client, outside, _ = guarded
    before = _files_under(outside)
    big = client.post("/ingest", files=[("files", ("big.pdf", b"x" * 1500, "application/pdf"))])
    assert big.status_code == 413 and "serve.max_upload_bytes" in big.json()["detail"]
    many = client.post("/ingest", files=[("files", (f"f{i}.pdf", b"x", "application/pdf")) for i in range(3)])
    assert many.status_code == 400 and "Too many files" in many.json()["detail"]
    # A body larger than every allowed file together is cut off while it is read.
    huge = client.post("/ingest", files=[("files", ("huge.pdf", os.urandom(4 << 20), "application/pdf"))])
    assert huge.status_code == 413
    assert client.post("/ingest", data={}).status_code == 400
    assert _files_under(outside) == before


def test_malformed_and_oversized_bodies_and_queries_are_4xx(guarded) -> None:
    client, _, _ = guarded
    malformed = client.post("/ask", content=b'{"question": ', headers={"Content-Type": "application/json"})
    assert malformed.status_code == 422 and malformed.json()["detail"][0]["type"] == "json_invalid"
    assert client.post("/ask", json={"question": ""}).status_code == 422
    assert client.post("/ask", json={"question": 42}).status_code == 422
    assert client.post("/ask", json={"question": "which?", "format": "mc", "options": ["a"]}).status_code == 422
    # The pipeline's own option rules, checked before anything loads (was: an error event after the model loaded).
    repeated = client.post("/ask", json={"question": "which?", "options": ["5 g", "12 g", "5  g"]})
    assert repeated.status_code == 400 and "given twice" in repeated.json()["detail"]
    as_text = client.post("/ask", json={"question": "which?", "options": ["a", "b"], "format": "text"})
    assert as_text.status_code == 400 and "leave the format out" in as_text.json()["detail"]  # not answered as MC
    assert client.post("/ask", json={"question": "q", "format": "poem"}).status_code == 422
    too_long = client.post("/ask", json={"question": "why " * 20})
    assert too_long.status_code == 400 and "serve.max_query_chars" in too_long.json()["detail"]
    assert client.get("/search", params={"q": "dna " * 20}).status_code == 400
    assert client.get("/search", params={"q": "dna", "k": 0}).status_code == 422
    assert client.get("/search", params={"q": "dna", "method": "magic"}).status_code == 422
    assert client.get("/search").status_code == 422
    assert client.post("/ask", content=b"{" + b" " * (2 << 20) + b"}",
                       headers={"Content-Type": "application/json"}).status_code == 413
    assert client.get("/papers/nothing-here").status_code == 404
    assert client.get("/locate/nothing-here").status_code == 400


def test_a_failing_answer_arrives_as_an_error_event(tmp_path: Path) -> None:
    def broken_ask(question, settings, **_):
        raise RuntimeError("the LLM server refused the connection")

    with background_server(create_app(_settings(tmp_path), ask_fn=broken_ask)) as url:
        response = httpx.post(f"{url}/ask", json={"question": "why?"}, timeout=30)
    assert response.status_code == 200
    assert sse_events(response) == [
        ("error", {"detail": "answering failed: RuntimeError: the LLM server refused the connection"})
    ]


def test_a_short_token_is_refused_when_settings_load(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 16"):
        _settings(tmp_path, token="short")


def test_a_search_asking_for_more_than_max_k_is_capped_not_refused(tmp_path: Path) -> None:
    # The web page asks for 10: a server configured with serve.max_k below 10 refused every search from it.
    from strata.documents.builder import PaperBuilder
    from strata.index import CorpusIndex
    from strata.store import open_store

    settings = _settings(tmp_path / "home", max_k="2")
    with open_store(settings) as store:
        for number in range(4):
            builder = PaperBuilder(f"p{number}", "test")
            builder.open_section("Results", 1)
            builder.add_block(f"Zinc lozenges shortened colds in trial {number}.")
            store.put_paper(builder.build(title=f"Zinc trial {number}"), "sha")
        CorpusIndex(store, settings).sync()
    with background_server(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        response = client.get("/search", params={"q": "zinc colds", "k": 10, "method": "bm25"})
        assert response.status_code == 200 and len(response.json()["candidates"]) == 2
