"""Hostile and broken inputs for every parser, and the per-file ingest path that must turn each into a parsed document
or a clear per-file error.

Two sources: named cases (encrypted, zero-page, huge page counts, non-PDFs named .pdf, deep nesting, entity bombs,
wrong JSON types) and hypothesis mutations (truncation, byte flips, insertions, deletions, JSON values swapped for
random ones) of seeds: a generated PDF and real S2ORC, TEI, JATS, unarXive and BEIR files from ../shared/data.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pymupdf
from hypothesis import strategies as st
from pydantic import BaseModel

from strata.config import Settings
from strata.pipeline.ingest import ingest_file  # the per-file path of `ingest`: time limit, error capture, store write
from strata.store.sqlite import CorpusStore

# The default for benchmarks/reliability.py; tests pass the `shared_data` fixture, which marks them integration.
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
S2ORC_SAMPLES = Path("s2orc-doc2json-samples") / "tests"  # under the data folder
# Seconds a file may overrun its time limit before it counts as a hang (SIGALRM lands between Python bytecodes).
HANG_GRACE_S = 5.0


class HostileInput(BaseModel):
    family: str
    suffix: str
    data: bytes

    def __repr__(self) -> str:  # hypothesis prints failing examples; megabytes of data would drown the report
        return f"HostileInput({self.family!r}, {self.suffix!r}, {len(self.data)} bytes: {self.data[:80]!r})"


class FuzzOutcome(BaseModel):
    family: str
    status: str
    seconds: float
    detail: str = ""


# seeds


def seed_pdf(pages: int = 3) -> bytes:
    """A small paper-like PDF: title, abstract, numbered headings, paragraphs and a reference list."""
    document = pymupdf.open()
    for number in range(1, pages + 1):
        page = document.new_page()
        y = 72
        if number == 1:
            page.insert_text((72, y), "A Study of Robust Parsing Under Hostile Input", fontsize=18)
            y += 40
            page.insert_text((72, y), "Abstract", fontsize=12)
            y += 20
        page.insert_text((72, y), f"{number} Section {number}", fontsize=13)
        y += 24
        for line in range(12):
            page.insert_text((72, y), f"Paragraph text line {line} of section {number} about cells and proteins.")
            y += 14
        if number == pages:
            page.insert_text((72, y + 20), "References", fontsize=13)
            page.insert_text((72, y + 40), "[1] A. Author. A cited paper title. Journal of Tests, 2020.")
    data = document.tobytes()
    document.close()
    return data


def seeds(data: Path = SHARED_DATA) -> list[HostileInput]:
    s2orc_samples = data / S2ORC_SAMPLES
    unarxive_line = (data / "unarxive-sample" / "arXiv_src_2212_086.jsonl").open("rb").readline()
    beir_lines = b"".join((data / "scifact" / "beir" / "corpus.jsonl").open("rb").readlines()[:3])
    return [
        HostileInput(family="pdf", suffix=".pdf", data=seed_pdf()),
        HostileInput(family="s2orc", suffix=".json", data=(s2orc_samples / "pdf" / "N18-3011.json").read_bytes()),
        HostileInput(family="tei", suffix=".tei.xml", data=(s2orc_samples / "pdf" / "N18-3011.tei.xml").read_bytes()),
        HostileInput(family="jats", suffix=".nxml", data=(s2orc_samples / "jats" / "PMC5828200.nxml").read_bytes()),
        HostileInput(family="unarxive", suffix=".jsonl", data=unarxive_line),
        HostileInput(family="beir", suffix=".jsonl", data=beir_lines),
    ]


# named cases


def _pdf(objects: list[bytes]) -> bytes:
    """A PDF file from numbered object bodies (1 0 obj ... endobj), with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


_WORDS = "cells bind protein kinase signal membrane receptor growth factor mouse assay gene pathway mutation".split()


def pages_pdf(count: int, with_text: bool, distinct_lines: bool = False) -> bytes:
    """`count` pages of 12 lines each. Lines that differ only in their numbers are dropped as running headers, so
    parsing them is quick; `distinct_lines` gives every line its own words, which the parser reads in full (slowly)."""
    document = pymupdf.open()
    for number in range(count):
        page = document.new_page()
        words = random.Random(number)
        for line in range(12 if with_text else 0):
            text = (
                " ".join(words.choice(_WORDS) for _ in range(9))
                if distinct_lines
                else f"Line {line} of page {number}: cells {number * line} bind."
            )
            page.insert_text((72, 72 + 14 * line), text)
    data = document.tobytes(garbage=1)
    document.close()
    return data


def _encrypted_pdf(user_password: str) -> bytes:
    document = pymupdf.open("pdf", seed_pdf())
    data = document.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner", user_pw=user_password)
    document.close()
    return data


def _huge_page_pdf(lines: int) -> bytes:
    """One page whose content stream draws `lines` lines of text."""
    shown = b"".join(b"0 -11 Td (line %d: cells bind %d) Tj " % (i, i * 7) for i in range(lines))
    content = b"BT /F1 9 Tf 20 14380 Td " + shown + b"ET"
    return _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 14400 14400] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ])  # fmt: skip


@lru_cache(maxsize=2)
def named_cases(scale: int = 1, data: Path = SHARED_DATA) -> tuple[HostileInput, ...]:
    """Deterministic hostile files; `scale` multiplies the sizes (page counts, nesting depth, string length)."""
    pdf = lambda family, data: HostileInput(family=f"pdf:{family}", suffix=".pdf", data=data)  # noqa: E731
    deep = 20_000 * scale
    s2orc = json.loads((data / S2ORC_SAMPLES / "pdf" / "N18-3011.json").read_bytes())
    tei = (data / S2ORC_SAMPLES / "pdf" / "N18-3011.tei.xml").read_bytes()
    cases = [
        pdf("encrypted", _encrypted_pdf("secret")),
        pdf("owner-password-only", _encrypted_pdf("")),
        pdf("zero-pages", _pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"])),
        pdf("lying-page-count", _pdf([
            b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 100000000 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        ])),  # fmt: skip
        pdf("page-tree-cycle", _pdf([
            b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        ])),  # fmt: skip
        pdf("deeply-nested-objects", _pdf([
            b"<< /Type /Catalog /Pages 2 0 R /Deep " + b"[" * deep + b"]" * deep + b" >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        ])),  # fmt: skip
        pdf("many-blank-pages", pages_pdf(2_000 * scale, with_text=False)),
        pdf("many-text-pages", pages_pdf(100 * scale, with_text=True)),
        pdf("huge-page", _huge_page_pdf(5_000 * scale)),
        pdf("empty", b""),
        pdf("plain-text", b"this is plain text, not a PDF\n" * 10),
        pdf("png-bytes", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4),
        pdf("zip-bytes", b"PK\x03\x04" + bytes(200)),
        pdf("html", b"<!doctype html><html><body>Not found</body></html>"),
        pdf("header-then-garbage", b"%PDF-1.7\n" + random.Random(0).randbytes(4096)),
        HostileInput(family="s2orc:deep-array", suffix=".json",
                     data=b'{"paper_id": "x", "body_text": ' + b"[" * deep + b"]" * deep + b"}"),
        HostileInput(family="s2orc:deep-object", suffix=".json",
                     data=b'{"paper_id": "x", "body_text": [' + b'{"a":' * deep + b"1" + b"}" * deep + b"]}"),
        HostileInput(family="s2orc:wrong-types", suffix=".json", data=json.dumps(
            {**s2orc, "title": 7, "abstract": {"x": 1}, "body_text": "text", "bib_entries": [1, None],
             "metadata": None}).encode()),  # fmt: skip
        HostileInput(family="s2orc:huge-string", suffix=".json", data=json.dumps(
            {"paper_id": "x", "title": "t", "body_text": [{"text": "cells " * (400_000 * scale), "section": "S"}]}
        ).encode()),  # fmt: skip
        HostileInput(family="s2orc:lone-surrogates", suffix=".json",
                     data=json.dumps({**s2orc, "title": "bad \ud800 title"}).encode()),
        HostileInput(family="s2orc:truncated", suffix=".json", data=json.dumps(s2orc).encode()[:5000]),
        HostileInput(family="beir:mixed-bad-lines", suffix=".jsonl", data=b"\n".join([
            b'{"_id": "1", "title": "ok", "text": "fine text"}', b"{not json", b'{"_id": null, "title": 3, "text": []}',
            b"[" * deep, b'{"_id": "2", "title": "", "text": ""}', b'"just a string"',
        ])),  # fmt: skip
        HostileInput(family="unarxive:wrong-types", suffix=".jsonl", data=json.dumps(
            {"paper_id": 5, "metadata": "x", "abstract": [1], "body_text": {"a": 1}, "bib_entries": "y",
             "ref_entries": None}).encode()),  # fmt: skip
        HostileInput(family="tei:billion-laughs", suffix=".tei.xml", data=(
            b'<?xml version="1.0"?><!DOCTYPE TEI [<!ENTITY a "lollollollollollollollollollol">'
            + b"".join(b'<!ENTITY %s "%s">' % (chr(98 + i).encode(), (b"&" + chr(97 + i).encode() + b";") * 10)
                       for i in range(9))
            + b']><TEI xmlns="http://www.tei-c.org/ns/1.0"><text><body><p>&j;</p></body></text></TEI>')),
        HostileInput(family="tei:external-entity", suffix=".tei.xml", data=(
            b'<?xml version="1.0"?><!DOCTYPE TEI [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            b'<TEI xmlns="http://www.tei-c.org/ns/1.0"><text><body><p>&x;</p></body></text></TEI>')),
        HostileInput(family="tei:deep-nesting", suffix=".tei.xml", data=(
            b'<TEI xmlns="http://www.tei-c.org/ns/1.0"><text><body>' + b"<div>" * deep + b"<p>deep</p>"
            + b"</div>" * deep + b"</body></text></TEI>")),  # fmt: skip
        HostileInput(family="tei:unclosed", suffix=".tei.xml", data=tei[: len(tei) // 2]),
        HostileInput(family="jats:wrong-root", suffix=".nxml", data=b"<html><body><p>not JATS</p></body></html>"),
        HostileInput(family="jats:deep-nesting", suffix=".nxml", data=(
            b"<article><body>" + b"<sec>" * deep + b"<p>deep</p>" + b"</sec>" * deep + b"</body></article>")),
    ]
    return tuple(cases)


# hypothesis mutations

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@st.composite
def byte_mutation(draw, seed: HostileInput) -> HostileInput:
    data = bytearray(seed.data)
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "duplicate"]))
    at = draw(st.integers(0, len(data)))
    if kind == "truncate":
        data = data[:at]
    elif kind == "flip":
        for position in draw(st.lists(st.integers(0, max(len(data) - 1, 0)), min_size=1, max_size=32)):
            if data:
                data[position] = draw(st.integers(0, 255))
    elif kind == "insert":
        data[at:at] = draw(st.binary(min_size=1, max_size=64))
    elif kind == "delete":
        del data[at : at + draw(st.integers(1, 512))]
    else:
        data[at:at] = data[at : at + draw(st.integers(1, 4096))]
    return HostileInput(family=f"{seed.family}:{kind}", suffix=seed.suffix, data=bytes(data))


@st.composite
def json_value_swap(draw, seed: HostileInput) -> HostileInput:
    """One value somewhere in a JSON seed replaced by a random JSON value (wrong types, nulls, nesting)."""
    # A .json file is one record (often pretty-printed); a .jsonl file is one record per line.
    lines = seed.data.decode().splitlines() if seed.suffix == ".jsonl" else [seed.data.decode()]
    line = draw(st.integers(0, len(lines) - 1))
    record = json.loads(lines[line])
    paths = list(_value_paths(record))
    target = draw(st.sampled_from(paths))
    replacement = draw(JSON_VALUES)
    lines[line] = json.dumps(_replaced(record, target, replacement))
    return HostileInput(family=f"{seed.family}:swap", suffix=seed.suffix, data="\n".join(lines).encode())


def _value_paths(value: object, prefix: tuple = (), depth: int = 0):
    yield prefix
    if depth >= 4:
        return
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in list(items)[:12]:
        yield from _value_paths(child, prefix + (key,), depth + 1)


def _replaced(value: object, path: tuple, replacement: object) -> object:
    if not path:
        return replacement
    copy = dict(value) if isinstance(value, dict) else list(value)  # type: ignore[arg-type]
    copy[path[0]] = _replaced(copy[path[0]], path[1:], replacement)
    return copy


def mutations(all_seeds: list[HostileInput]) -> st.SearchStrategy[HostileInput]:
    json_seeds = [seed for seed in all_seeds if seed.suffix in (".json", ".jsonl")]
    return st.one_of(
        st.sampled_from(all_seeds).flatmap(byte_mutation),
        st.sampled_from(json_seeds).flatmap(json_value_swap),
    )


# running one input through the per-file ingest path


class FuzzRun:
    """Feeds hostile inputs, one file each, through ingest's per-file path into one store; records every outcome."""

    def __init__(self, folder: Path, per_file_timeout_s: float) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.settings = Settings.load(
            overrides={"store.home": str(folder / "home"), "parsing.per_file_timeout_s": per_file_timeout_s}
        )
        self.store = CorpusStore(self.settings.store.home / "corpus.sqlite3")
        self.outcomes: list[FuzzOutcome] = []

    def run(self, case: HostileInput) -> FuzzOutcome:
        path = self.folder / f"input-{len(self.outcomes):06d}{case.suffix}"
        path.write_bytes(case.data)
        started = time.monotonic()
        try:
            result = ingest_file(self.store, path, self.settings)
            status, detail = ("parsed", "") if result.status == "ok" else ("error", result.error or "")
            if status == "error" and not detail.strip():
                status, detail = "crash", "failed without a reason"
        except Exception as error:  # anything escaping the per-file path would abort a whole ingest
            status, detail = "crash", f"{type(error).__name__}: {error}"[:500]
        seconds = time.monotonic() - started
        if seconds > self.settings.parsing.per_file_timeout_s + HANG_GRACE_S:
            status, detail = "hang", f"took {seconds:.1f}s; {detail}"
        path.unlink()
        outcome = FuzzOutcome(family=case.family, status=status, seconds=round(seconds, 3), detail=detail)
        self.outcomes.append(outcome)
        return outcome

    def close(self) -> None:
        self.store.close()

    def table(self) -> dict[str, dict[str, int]]:
        """family -> status -> count."""
        counts: dict[str, Counter[str]] = {}
        for outcome in self.outcomes:
            counts.setdefault(outcome.family, Counter())[outcome.status] += 1
        return {family: dict(sorted(by.items())) for family, by in sorted(counts.items())}
