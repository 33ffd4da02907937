"""Saving a ToC adapter swaps it in whole: an interrupted save never leaves new weights under old meta."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.toc.adapter import AdapterMeta, has_adapter, read_adapter_meta, save_adapter

WEIGHTS = "adapter_model.safetensors"


class FakePeft:
    def __init__(self, tag: str, fail: bool = False) -> None:
        self.tag, self.fail = tag, fail

    def save_pretrained(self, path: str) -> None:
        (Path(path) / WEIGHTS).write_text(self.tag)
        if self.fail:
            raise OSError("No space left on device")


def meta(paper: str) -> AdapterMeta:
    return AdapterMeta(mode="stair", base_model="base", paper_ids=[paper], lora_r=8, lora_alpha=16)


def test_an_interrupted_save_keeps_the_previous_adapter_whole(tmp_path: Path):
    folder = tmp_path / "adapters" / "book"
    assert not has_adapter(folder)
    save_adapter(FakePeft("first"), folder, meta("first"))
    with pytest.raises(OSError):
        save_adapter(FakePeft("second", fail=True), folder, meta("second"))
    assert (folder / WEIGHTS).read_text() == "first" and read_adapter_meta(folder).paper_ids == ["first"]
    save_adapter(FakePeft("third"), folder, meta("third"))
    assert (folder / WEIGHTS).read_text() == "third" and read_adapter_meta(folder).paper_ids == ["third"]
    assert sorted(path.name for path in folder.parent.iterdir()) == ["book"]  # no partial or old copy left


def test_a_folder_without_meta_holds_no_adapter(tmp_path: Path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / WEIGHTS).write_text("weights of a save cut short")
    assert not has_adapter(tmp_path / "book")
