"""The static embedding tier: distilled from the packaged MiniLM on first use, cached atomically, selected by
setting, and never mixed with MiniLM vectors in one dense index.

The distillations here keep only MiniLM's first few thousand word pieces (`static_vocabulary`) and 32 dimensions, so
each builds in seconds; the encoding path is the one the full model uses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata.config import EmbeddingSettings, Settings
from strata.encoders.embedder import Embedder, encoder_identity, resolve_model_path
from strata.encoders.static import StaticEncoder, ensure_static_model, static_model_folder
from strata.index import CorpusIndex
from strata.index.dense import DenseState
from strata.index.state import read_state
from strata.store.sqlite import CorpusStore

from test_index import PAPERS

TINY = {"static_vocabulary": 3000, "static_dims": 32}
TEXTS = [
    "The cell of the heart and the blood.",
    "A new method for the study of water in the city.",
    "Music, art and film: the history of the world!",
    "",
    "the THE The",
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[EmbeddingSettings, Path]:
    settings = EmbeddingSettings(backend="static", static_dir=tmp_path_factory.mktemp("static"), **TINY)
    return settings, ensure_static_model(settings, resolve_model_path(settings.model))


def test_distillation_builds_once_into_the_cache_and_leaves_no_temporary_folder(tiny_model) -> None:
    settings, folder = tiny_model
    assert folder == static_model_folder(settings, resolve_model_path(settings.model))
    assert folder.parent == settings.static_dir and (folder / "model.safetensors").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no .tmp left beside it
    built = (folder / "model.safetensors").stat().st_mtime_ns
    assert ensure_static_model(settings, resolve_model_path(settings.model)) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == built  # cached: not distilled again
    other = settings.model_copy(update={"static_dims": 16})
    assert static_model_folder(other, resolve_model_path(other.model)) != folder  # other parameters, other model


def test_an_interrupted_distillation_leaves_no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import strata.encoders.static as static

    def crash(model_path: Path, target: Path, dims: int, vocabulary: int = 0) -> None:
        (target / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(static, "distill_static", crash)
    settings = EmbeddingSettings(backend="static", static_dir=tmp_path, **TINY)
    with pytest.raises(KeyboardInterrupt):
        ensure_static_model(settings, resolve_model_path(settings.model))
    assert list(tmp_path.iterdir()) == []


def test_embeddings_are_unit_vectors_and_match_model2vec(tiny_model) -> None:
    settings, folder = tiny_model
    vectors = Embedder(settings).embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 32) and vectors.dtype == np.float32
    norms = np.linalg.norm(vectors, axis=1)
    assert np.allclose(norms[[0, 1, 2, 4]], 1.0, atol=1e-5) and norms[3] == 0.0  # an empty text has no direction
    # The vectorised word table agrees with model2vec's own encoder (its tokenizer, text by text).
    from model2vec import StaticModel

    reference = StaticModel.from_pretrained(folder, force_download=False).encode(TEXTS, max_length=None)
    for row in (0, 1, 2, 4):
        assert float(vectors[row] @ reference[row]) > 0.999
    # Case and repetition do not change the direction (lowercasing, mean pooling); a second call reuses the table.
    assert np.allclose(Embedder(settings).embed(["the"])[0], vectors[4], atol=1e-6)


def test_similar_texts_are_closer_than_unrelated_ones(tiny_model) -> None:
    settings, _ = tiny_model
    embedder = Embedder(settings)
    heart, blood, music = embedder.embed(["the heart and the blood", "blood of the heart", "music and film"])
    assert heart @ blood > heart @ music


def test_words_are_cut_as_the_tokenizer_cuts_them(tiny_model) -> None:
    _, folder = tiny_model
    encoder = StaticEncoder(folder)
    assert encoder._wordpiece is not None  # MiniLM's WordPiece: the Python path is taken for ASCII words
    words = ["the", "heart", "hearts", "water-proof", "unbelievable", "x" * 120, "naïve", "42"]
    for word in words:
        expected = [i for i in encoder._tokenizer.encode(word, add_special_tokens=False).ids if i != encoder._unk]
        pieces = encoder._wordpiece(word)
        if pieces is not None:
            assert [i for i in pieces if i != encoder._unk] == expected, word


def test_the_backend_setting_switches_the_encoder(tiny_model) -> None:
    settings, _ = tiny_model
    minilm = EmbeddingSettings()
    assert encoder_identity(minilm) == "packaged:all-MiniLM-L6-v2"  # what existing indices recorded
    assert encoder_identity(settings) == "static:packaged:all-MiniLM-L6-v2:d32:v3000"
    loaded = Settings.load(overrides={"index.embedding.backend": "static", "index.embedding.static_dims": "32"})
    assert loaded.index.embedding.backend == "static"
    assert Embedder(settings).dimension == 32
    with pytest.raises(ValueError):
        Settings.load(overrides={"index.embedding.backend": "word2vec"})


def test_a_model_with_query_and_document_prompts_gets_each_on_its_side(tmp_path: Path) -> None:
    # An asymmetric model (bge, arctic, nomic) names its prompts in its config: plain encode() used neither.
    import json

    packaged = resolve_model_path("packaged:all-MiniLM-L6-v2")
    prompted = tmp_path / "prompted"
    prompted.mkdir()
    for item in packaged.iterdir():
        (prompted / item.name).symlink_to(item)
    (prompted / "config_sentence_transformers.json").unlink()
    prompts = {"query": "query: ", "document": "passage: "}
    (prompted / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))
    plain, asymmetric = Embedder(EmbeddingSettings()), Embedder(EmbeddingSettings(model=str(prompted)))
    assert np.allclose(asymmetric.embed_query("zinc and colds"), plain.embed_query("query: zinc and colds"), atol=1e-6)
    assert np.allclose(asymmetric.embed(["Zinc shortens colds"]), plain.embed(["passage: Zinc shortens colds"]),
                       atol=1e-6)  # fmt: skip


def test_a_dense_index_built_with_one_encoder_refuses_the_other_until_a_sync_rebuilds_it(
    tiny_model, tmp_path: Path
) -> None:
    tiny, _ = tiny_model
    static = {f"index.embedding.{name}": value for name, value in tiny.model_dump().items()}
    settings = Settings.load(overrides={"store.home": str(tmp_path), **static})
    store = CorpusStore(tmp_path / "corpus.sqlite3")
    for paper in PAPERS:
        store.put_paper(paper, "sha")
    index = CorpusIndex(store, settings)
    assert index.sync().dense_size == store.stats().chunks
    state = read_state(index.dense.state_path, DenseState)
    assert state is not None and state.model == encoder_identity(tiny) and state.dimension == 32
    assert index.dense.search_text("protein folding", 3)

    minilm = Settings.load(overrides={"store.home": str(tmp_path), "index.embedding.threads": "1"})
    other = CorpusIndex(store, minilm)
    with pytest.raises(ValueError, match="static:packaged:all-MiniLM-L6-v2:d32"):
        other.dense.search_text("protein folding", 3)
    assert other.sync().dense_size == store.stats().chunks  # the sync rebuilds it with MiniLM
    rebuilt = read_state(other.dense.state_path, DenseState)
    assert rebuilt is not None and rebuilt.model == "packaged:all-MiniLM-L6-v2" and rebuilt.dimension == 384
    with pytest.raises(ValueError, match="built with 'packaged:all-MiniLM-L6-v2'"):
        CorpusIndex(store, settings).dense.search_text("protein folding", 3)
    store.close()


def test_minilm_rescoring_reorders_the_static_first_pass(tiny_model, tmp_path: Path) -> None:
    from strata.index.state import ChunkScore
    from strata.retrieve.hybrid import rescore_with_model

    tiny, _ = tiny_model
    store = CorpusStore(tmp_path / "corpus.sqlite3")
    for paper in PAPERS:
        store.put_paper(paper, "sha")
    rowids = sorted(store.chunk_paper_ids(range(1, 100)))
    paper_of = store.chunk_paper_ids(rowids)
    # A first pass that ranks the graphene chunk last of the re-scored ones, and one more hit below them.
    graphene = next(r for r in rowids if paper_of[r] == "alpha")
    others = [r for r in rowids if r != graphene]
    hits = [ChunkScore(r, 0.9 - 0.1 * i) for i, r in enumerate(others[:2] + [graphene] + others[2:3])]
    settings = tiny.model_copy(update={"rescore_top_k": 3, "threads": 1})
    rescored = rescore_with_model("graphene electrical conductivity", hits, store, settings)
    assert rescored[0].rowid == graphene  # MiniLM knows what the query is about
    assert [h.rowid for h in rescored[3:]] == [others[2]]  # below the re-scored ones, in its place
    assert rescored[3].score < min(h.score for h in rescored[:3])
    store.close()


def test_a_model_with_prompts_records_them_in_its_identity(tmp_path: Path) -> None:
    packaged = resolve_model_path(EmbeddingSettings().model)
    for source in packaged.iterdir():  # a copy of MiniLM by links, then its config given a query prompt
        (tmp_path / source.name).symlink_to(source)
    plain = encoder_identity(EmbeddingSettings(model=str(tmp_path)))
    assert plain == str(tmp_path)  # no prompts: the identity existing indices recorded
    config = tmp_path / "config_sentence_transformers.json"
    config.unlink()
    config.write_text('{"prompts": {"query": "query: ", "document": ""}}')
    prompted = encoder_identity(EmbeddingSettings(model=str(tmp_path)))
    assert prompted.startswith(str(tmp_path) + ":prompts-") and prompted != plain
