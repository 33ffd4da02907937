"""The package's rooms import one way: each stage imports only the model and the stages below it, and the product
never imports training or experiment code (the training commands of the CLI excepted)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "strata"

# Lowest first. A module may import from its own room and from rooms in lower layers, never sideways or upwards.
LAYERS: list[set[str]] = [
    {"config", "progress", "stats"},
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
        if isinstance(node, ast.ImportFrom) and node.module == "strata":  # `from strata import serve`
            names = [f"strata.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
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


def against_the_flow(path: Path, source: str) -> list[str]:
    """The imports of `path` (a module of room `source`) that go sideways or upwards."""
    return [
        f"{path.name}:{line} strata.{source} imports strata.{target}"
        for line, target in imported_rooms(path)
        if target != source and layer_of(target) >= layer_of(source)
    ]


def test_imports_go_down_only():
    wrong = [line for path in modules() for line in against_the_flow(path, room_of(path))]
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


def test_the_check_sees_a_lazy_upward_import_and_allows_a_downward_one(tmp_path):
    # Lazy imports count too, or the layering tests above would pass on anything.
    module = tmp_path / "m.py"
    module.write_text("from strata.store import open_store\n\ndef f():\n    from strata.serve.app import create_app\n",
                      encoding="utf-8")
    assert list(imported_rooms(module)) == [(1, "store"), (4, "serve")]
    module.with_name("n.py").write_text("from strata import cli\n", encoding="utf-8")
    assert list(imported_rooms(module.with_name("n.py"))) == [(1, "cli")]
    assert against_the_flow(module, "read") == ["m.py:4 strata.read imports strata.serve"]
    assert against_the_flow(module, "cli") == []
    assert against_the_flow(module, "llm") == ["m.py:1 strata.llm imports strata.store", "m.py:4 strata.llm imports strata.serve"]
