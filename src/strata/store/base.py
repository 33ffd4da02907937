"""What the SQLite and PostgreSQL corpus stores share: the row models and every method whose SQL is the same in both.

Shared statements are written once with sqlite3's `?` marks; `_sql` turns them into the driver's. A backend keeps
only what really differs: its schema, connection and transaction, how it matches a list of values (`_where_in`) and
how it orders text (`TEXT_ORDER`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import AbstractContextManager, closing
from typing import Any, Self

from pydantic import BaseModel

from strata.documents.identifiers import normalize_title
from strata.documents.model import Chunk, ContentType, Locator, Paper, Reference, Section
from strata.store.paper_map import ChunkPaperMap

# The tables both backends hold, with the column types each spells its own way: `real` (a float), `identity_key` (an
# ever-growing integer key, never reused: the watermarks rely on it) and `row_ref` (a column holding such a key).
SCHEMA_TEMPLATE = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, sha256 TEXT NOT NULL, status TEXT NOT NULL, error TEXT,
    paper_count INTEGER NOT NULL DEFAULT 0, updated {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS papers (
    id TEXT PRIMARY KEY, file_sha256 TEXT NOT NULL, title TEXT NOT NULL, norm_title TEXT NOT NULL,
    authors TEXT NOT NULL, year INTEGER, venue TEXT, doi TEXT, arxiv_id TEXT, abstract TEXT NOT NULL,
    source_format TEXT NOT NULL, source_path TEXT, text TEXT NOT NULL, sections TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS papers_doi ON papers(doi);
CREATE INDEX IF NOT EXISTS papers_arxiv ON papers(arxiv_id);
CREATE INDEX IF NOT EXISTS papers_norm_title ON papers(norm_title);
CREATE TABLE IF NOT EXISTS chunks (
    rowid {identity_key}, paper_id TEXT NOT NULL, ordinal INTEGER NOT NULL, text TEXT NOT NULL,
    content_type TEXT NOT NULL, section_path TEXT NOT NULL, page INTEGER,
    char_start INTEGER NOT NULL, char_end INTEGER NOT NULL, UNIQUE (paper_id, ordinal)
);
CREATE TABLE IF NOT EXISTS chunk_deletions (seq {identity_key}, chunk_rowid {row_ref} NOT NULL);
CREATE TABLE IF NOT EXISTS refs (
    paper_id TEXT NOT NULL, ordinal INTEGER NOT NULL, raw TEXT NOT NULL, title TEXT, norm_title TEXT, year INTEGER,
    doi TEXT, arxiv_id TEXT, resolved_paper_id TEXT, PRIMARY KEY (paper_id, ordinal)
);
CREATE INDEX IF NOT EXISTS refs_resolved ON refs(resolved_paper_id);
"""

# A reference title must be this long before a title-only match counts, so "Introduction" never links two papers.
MIN_TITLE_MATCH_CHARS = 20


class FileRecord(BaseModel):
    path: str
    sha256: str
    status: str
    error: str | None
    paper_count: int


class StoredChunk(BaseModel):
    """A chunk with its store row id (the key every index uses) and its paper's title."""

    rowid: int
    chunk: Chunk
    paper_title: str


class PaperSummary(BaseModel):
    id: str
    title: str
    year: int | None
    venue: str | None
    doi: str | None
    arxiv_id: str | None


class CorpusStats(BaseModel):
    papers: int
    chunks: int
    references: int
    resolved_references: int
    citation_edges: int
    files_ok: int
    files_failed: int
    chunks_by_type: dict[str, int]


class SqlCorpusStore:
    """The store's methods over a DB-API connection `_db` (sqlite3 or psycopg), guarded by `_lock`."""

    # The driver's parameter mark.
    MARK = "?"
    # Appended to text ORDER BY keys so both backends sort ids by code point, whatever the database's locale.
    TEXT_ORDER = ""

    _db: Any
    _lock: threading.RLock
    _paper_map: ChunkPaperMap | None = None

    def _transaction(self) -> AbstractContextManager[Any]:
        """A write transaction on `_db`, yielding the connection (each backend takes its own write lock)."""
        raise NotImplementedError

    def _where_in(self, column: str, values: list[Any]) -> Iterator[tuple[str, list[Any]]]:
        """(condition, parameters) pairs that together select the rows whose `column` is one of `values`."""
        raise NotImplementedError

    def _sql(self, statement: str) -> str:
        return statement.replace("?", self.MARK)

    def _query(self, sql: str, params: Iterable[object] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(self._sql(sql), tuple(params)).fetchall()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # files

    def file_record(self, path: str) -> FileRecord | None:
        rows = self._query("SELECT path, sha256, status, error, paper_count FROM files WHERE path = ?", [path])
        return _file_record(rows[0]) if rows else None

    def record_file(self, path: str, sha256: str, status: str, error: str | None = None, paper_count: int = 0) -> None:
        with self._transaction() as db:
            db.execute(
                self._sql(
                    "INSERT INTO files (path, sha256, status, error, paper_count, updated) VALUES (?,?,?,?,?,?)"
                    " ON CONFLICT (path) DO UPDATE SET sha256 = EXCLUDED.sha256, status = EXCLUDED.status,"
                    " error = EXCLUDED.error, paper_count = EXCLUDED.paper_count, updated = EXCLUDED.updated"
                ),
                (path, sha256, status, error, paper_count, time.time()),
            )

    def failed_files(self) -> list[FileRecord]:
        rows = self._query("SELECT path, sha256, status, error, paper_count FROM files WHERE status = 'failed'")
        return [_file_record(row) for row in rows]

    # papers

    def has_paper(self, paper_id: str, file_sha256: str | None = None) -> bool:
        if file_sha256 is None:
            return bool(self._query("SELECT 1 FROM papers WHERE id = ?", [paper_id]))
        return bool(self._query("SELECT 1 FROM papers WHERE id = ? AND file_sha256 = ?", [paper_id, file_sha256]))

    def paper_source(self, paper_id: str) -> str | None:
        """The file key the stored paper `paper_id` came from (None: no such paper, or none recorded)."""
        rows = self._query("SELECT source_path FROM papers WHERE id = ?", [paper_id])
        return rows[0][0] if rows else None

    def put_paper(self, paper: Paper, file_sha256: str) -> None:
        """Store `paper`, replacing any earlier version, in one transaction: a crash leaves the old or the new one."""
        self.put_papers([paper], file_sha256)

    def put_papers(self, papers: Iterable[Paper], file_sha256: str) -> None:
        """Store several papers in one transaction (one round trip per table, for bulk loads)."""
        papers = list(papers)
        with self._transaction() as db, closing(db.cursor()) as cursor:
            for paper in papers:
                self._delete_paper(cursor, paper.id)
            cursor.executemany(
                self._sql("INSERT INTO papers VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
                [
                    (
                        p.id, file_sha256, p.title, normalize_title(p.title), json.dumps(p.authors), p.year, p.venue,
                        p.doi, p.arxiv_id, p.abstract, p.source_format, p.source_path, p.text,
                        json.dumps([s.model_dump() for s in p.sections]),
                    )
                    for p in papers
                ],
            )
            cursor.executemany(
                self._sql(
                    "INSERT INTO chunks (paper_id, ordinal, text, content_type, section_path, page, char_start,"
                    " char_end) VALUES (?,?,?,?,?,?,?,?)"
                ),
                [
                    (c.paper_id, c.ordinal, c.text, c.content_type.value, json.dumps(c.section_path), c.page,
                     c.char_start, c.char_end)
                    for p in papers
                    for c in p.chunks
                ],
            )
            cursor.executemany(
                self._sql("INSERT INTO refs VALUES (?,?,?,?,?,?,?,?,?)"),
                [
                    (p.id, i, r.raw, r.title, normalize_title(r.title), r.year, r.doi, r.arxiv_id, None)
                    for p in papers
                    for i, r in enumerate(p.references)
                ],
            )

    def remove_papers_of_file(self, source_path: str, keep: Collection[str]) -> list[str]:
        """Delete the papers stored from `source_path` that are not in `keep` (a changed file's dropped records), in
        one transaction; their ids."""
        stored = self._query("SELECT id FROM papers WHERE source_path = ? ORDER BY id", [source_path])
        gone = [paper_id for (paper_id,) in stored if paper_id not in keep]
        if gone:
            with self._transaction() as db, closing(db.cursor()) as cursor:
                for paper_id in gone:
                    self._delete_paper(cursor, paper_id)
        return gone

    def _delete_paper(self, cursor: Any, paper_id: str) -> None:
        # Logged in row id order, so indices drop a paper's chunks in the order they were added.
        cursor.execute(
            self._sql(
                "INSERT INTO chunk_deletions (chunk_rowid) SELECT rowid FROM chunks WHERE paper_id = ? ORDER BY rowid"
            ),
            (paper_id,),
        )
        cursor.execute(self._sql("DELETE FROM chunks WHERE paper_id = ?"), (paper_id,))
        cursor.execute(self._sql("DELETE FROM refs WHERE paper_id = ?"), (paper_id,))
        cursor.execute(self._sql("DELETE FROM papers WHERE id = ?"), (paper_id,))

    def get_paper(self, paper_id: str) -> Paper:
        rows = self._query(
            "SELECT id, title, authors, year, venue, doi, arxiv_id, abstract, source_format, source_path, text, "
            "sections FROM papers WHERE id = ?",
            [paper_id],
        )
        if not rows:
            raise KeyError(f"no paper with id {paper_id!r} in the corpus")
        pid, title, authors, year, venue, doi, arxiv, abstract, fmt, source, text, sections = rows[0]
        return Paper(
            id=pid, title=title, authors=json.loads(authors), year=year, venue=venue, doi=doi, arxiv_id=arxiv,
            abstract=abstract, source_format=fmt, source_path=source, text=text,
            sections=[Section.model_validate(s) for s in json.loads(sections)],
            chunks=[stored.chunk for stored in self._chunks_where("c.paper_id = ? ORDER BY c.ordinal", [pid])],
            references=self.references_of(pid),
        )

    def paper_summaries(self, paper_ids: Iterable[str]) -> dict[str, PaperSummary]:
        summaries: dict[str, PaperSummary] = {}
        for condition, params in self._where_in("id", list(dict.fromkeys(paper_ids))):
            rows = self._query("SELECT id, title, year, venue, doi, arxiv_id FROM papers WHERE " + condition, params)
            summaries.update(
                (r[0], PaperSummary(id=r[0], title=r[1], year=r[2], venue=r[3], doi=r[4], arxiv_id=r[5])) for r in rows
            )
        return summaries

    def paper_ids(self) -> list[str]:
        return [row[0] for row in self._query(f"SELECT id FROM papers ORDER BY id{self.TEXT_ORDER}")]

    def paper_text(self, paper_id: str) -> str:
        rows = self._query("SELECT text FROM papers WHERE id = ?", [paper_id])
        if not rows:
            raise KeyError(f"no paper with id {paper_id!r} in the corpus")
        return rows[0][0]

    # chunks

    def _chunks_where(self, condition: str, params: Iterable[object]) -> list[StoredChunk]:
        rows = self._query(
            "SELECT c.rowid, c.paper_id, c.ordinal, c.text, c.content_type, c.section_path, c.page, c.char_start,"
            " c.char_end, p.title FROM chunks c JOIN papers p ON p.id = c.paper_id WHERE " + condition,
            params,
        )
        return [
            StoredChunk(
                rowid=rowid,
                chunk=Chunk(
                    paper_id=pid, ordinal=ordinal, text=text, content_type=ContentType(ctype),
                    section_path=tuple(json.loads(path)), page=page, char_start=start, char_end=end,
                ),
                paper_title=title,
            )
            for rowid, pid, ordinal, text, ctype, path, page, start, end, title in rows
        ]

    def chunks_after(self, rowid: int, limit: int = 1000, *, references: bool = True) -> list[StoredChunk]:
        """Chunks with a larger row id, in row id order: how indices catch up with the store. `references=False`
        leaves out reference-list entries."""
        kinds = "" if references else f" AND c.content_type <> '{ContentType.REFERENCE.value}'"
        return self._chunks_where(f"c.rowid > ?{kinds} ORDER BY c.rowid LIMIT ?", [rowid, limit])

    def get_chunks(self, rowids: Iterable[int]) -> dict[int, StoredChunk]:
        """Live chunks by row id; ids of deleted chunks are simply absent."""
        found: dict[int, StoredChunk] = {}
        for condition, params in self._where_in("c.rowid", list(dict.fromkeys(rowids))):
            found.update((s.rowid, s) for s in self._chunks_where(condition, params))
        return found

    def chunk_paper_ids(self, rowids: Iterable[int]) -> dict[int, str]:
        """Paper id of each live chunk by row id: what ranking roll-ups need, without reading chunk texts.

        Answered from an in-memory map of every chunk's paper (`strata.store.paper_map`), built on first use and
        kept exact by the row id and deletion watermarks: one small query per call instead of one per page of ids.
        """
        if self._paper_map is None:  # the store lock only once: it is held through every other thread's queries
            with self._lock:
                if self._paper_map is None:
                    self._paper_map = ChunkPaperMap(self)
        return self._paper_map.lookup(rowids)

    def chunk_papers_after(self, rowid: int, limit: int = 100_000) -> list[tuple[int, str]]:
        """(row id, paper id) of chunks with a larger row id, in row id order: how the chunk-paper map catches up."""
        rows = self._query("SELECT rowid, paper_id FROM chunks WHERE rowid > ? ORDER BY rowid LIMIT ?", [rowid, limit])
        return [(r, p) for r, p in rows]

    def max_chunk_rowid(self) -> int:
        return self._query("SELECT COALESCE(MAX(rowid), 0) FROM chunks")[0][0]

    def deletions_after(self, seq: int) -> list[tuple[int, int]]:
        """(seq, chunk rowid) of chunks removed since `seq`."""
        rows = self._query("SELECT seq, chunk_rowid FROM chunk_deletions WHERE seq > ? ORDER BY seq", [seq])
        return [(s, r) for s, r in rows]

    def locate(self, locator: Locator) -> tuple[Locator, str]:
        """The exact text a locator names, with its section path and page filled in from the chunk holding it."""
        text = locator.resolve(self.paper_text(locator.paper_id))
        return self.place(locator), text

    def place(self, locator: Locator) -> Locator:
        """The locator with the section path and page of the chunk holding its span (as it was when none holds it);
        its paper's text is not read."""
        holding = self._chunks_where(
            "c.paper_id = ? AND c.char_start <= ? AND c.char_end >= ? ORDER BY c.ordinal LIMIT 1",
            [locator.paper_id, locator.char_start, locator.char_end],
        )
        if not holding:
            return locator
        chunk = holding[0].chunk
        return locator.model_copy(update={"section_path": chunk.section_path, "page": chunk.page})

    # references and the citation graph

    def references_of(self, paper_id: str) -> list[Reference]:
        rows = self._query(
            "SELECT raw, title, year, doi, arxiv_id, resolved_paper_id FROM refs WHERE paper_id = ? ORDER BY ordinal",
            [paper_id],
        )
        return [
            Reference(raw=raw, title=title, year=year, doi=doi, arxiv_id=arxiv, resolved_paper_id=resolved)
            for raw, title, year, doi, arxiv, resolved in rows
        ]

    def resolve_references(self) -> int:
        """Link every reference to the in-corpus paper with the same DOI, arXiv id or (long) normalised title."""
        first_id = f"ORDER BY p.id{self.TEXT_ORDER} LIMIT 1"
        with self._transaction() as db:
            db.execute(
                self._sql(
                    f"""
                    UPDATE refs SET resolved_paper_id = COALESCE(
                        (SELECT p.id FROM papers p WHERE refs.doi IS NOT NULL AND p.doi = refs.doi {first_id}),
                        (SELECT p.id FROM papers p WHERE refs.arxiv_id IS NOT NULL AND p.arxiv_id = refs.arxiv_id
                         {first_id}),
                        (SELECT p.id FROM papers p WHERE length(refs.norm_title) >= ? AND p.norm_title = refs.norm_title
                         {first_id}))
                    """
                ),
                (MIN_TITLE_MATCH_CHARS,),
            )
            # A paper citing itself is a parsing artefact, not an edge.
            db.execute("UPDATE refs SET resolved_paper_id = NULL WHERE resolved_paper_id = paper_id")
        return self._query("SELECT COUNT(*) FROM refs WHERE resolved_paper_id IS NOT NULL")[0][0]

    def citation_edges(self) -> list[tuple[str, str]]:
        """(citing, cited) in-corpus edges, deduplicated and sorted."""
        rows = self._query(
            f"SELECT DISTINCT paper_id{self.TEXT_ORDER}, resolved_paper_id{self.TEXT_ORDER} FROM refs"
            " WHERE resolved_paper_id IS NOT NULL ORDER BY 1, 2"
        )
        return [(a, b) for a, b in rows]

    def stats(self) -> CorpusStats:
        count = lambda sql: self._query(sql)[0][0]  # noqa: E731
        by_type = dict(
            self._query(f"SELECT content_type, COUNT(*) FROM chunks GROUP BY 1 ORDER BY content_type{self.TEXT_ORDER}")
        )
        return CorpusStats(
            papers=count("SELECT COUNT(*) FROM papers"),
            chunks=count("SELECT COUNT(*) FROM chunks"),
            references=count("SELECT COUNT(*) FROM refs"),
            resolved_references=count("SELECT COUNT(*) FROM refs WHERE resolved_paper_id IS NOT NULL"),
            citation_edges=count(
                "SELECT COUNT(*) FROM (SELECT DISTINCT paper_id, resolved_paper_id FROM refs "
                "WHERE resolved_paper_id IS NOT NULL) AS edges"
            ),
            files_ok=count("SELECT COUNT(*) FROM files WHERE status = 'ok'"),
            files_failed=count("SELECT COUNT(*) FROM files WHERE status = 'failed'"),
            chunks_by_type=by_type,
        )


def _file_record(row: tuple) -> FileRecord:
    path, sha256, status, error, paper_count = row
    return FileRecord(path=path, sha256=sha256, status=status, error=error, paper_count=paper_count)
