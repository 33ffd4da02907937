"""The package's rooms import one way: each stage imports only the model and the stages below it, and the product
never imports training or experiment code (the two training commands of the CLI excepted)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "strata"

# Lowest first. A module may import from its own room and from rooms in lower layers, never sideways or upwards.
LAYERS: list[set[str]] = [
    {"config"},
    {"documents"},
    {"store", "encoders", "llm"},
    {"index"},
    {"rerank"},
    {"retrieve"},
    {"toc"},
    {"corpus"},
    {"relate"},
    {"read"},
    {"pipeline"},
    {"eval"},
    {"train"},
    {"serve", "experiments"},
    {"cli"},
]
RESEARCH = {"train", "experiments"}
# Product modules allowed to reach research code, each only for the commands that train or run experiments.
RESEARCH_ENTRY_POINTS = {"cli"}


def layer_of(room: str) -> int:
    for number, rooms in enumerate(LAYERS):
        if room in rooms:
            return number
    raise AssertionError(f"strata.{room} is in no layer of tests/test_layers.py: add it where it belongs")


def room_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE).with_suffix("")
    return relative.parts[0]


def imported_rooms(path: Path) -> Iterator[tuple[int, str]]:
    """(line, room) of every `strata.ROOM` import in the file, lazy imports inside functions included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "strata" and len(parts) > 1:
                yield node.lineno, parts[1]


def modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if path.name != "__init__.py" or path.parent != PACKAGE)


def test_every_room_has_a_layer():
    rooms = {room_of(path) for path in modules()}
    for room in rooms:
        layer_of(room)


def test_imports_go_down_only():
    wrong = []
    for path in modules():
        source = room_of(path)
        for line, target in imported_rooms(path):
            if target != source and layer_of(target) >= layer_of(source):
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} strata.{source} imports strata.{target}")
    assert not wrong, "imports sideways or upwards:\n" + "\n".join(wrong)


def test_product_does_not_import_research_code():
    wrong = [
        f"{path.relative_to(PACKAGE)}:{line} imports strata.{target}"
        for path in modules()
        if room_of(path) not in RESEARCH | RESEARCH_ENTRY_POINTS
        for line, target in imported_rooms(path)
        if target in RESEARCH
    ]
    assert not wrong, "product code importing training or experiments:\n" + "\n".join(wrong)


def test_the_check_sees_a_sideways_import(tmp_path):
    # The walker must find lazy imports too, or the layering tests above would pass on anything.
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from strata.serve.app import create_app\n", encoding="utf-8")
    assert list(imported_rooms(module)) == [(2, "serve")]
