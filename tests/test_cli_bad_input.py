"""Bad input on the command line gets a clear error and a non-zero exit, and loses nothing: no empty store made
under a mistyped home, no count flag quietly replaced, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata import cli
from strata.pipeline.ingest import IngestReport


def never_called(*args: object, **kwargs: object) -> None:
    raise AssertionError("the command went on despite the bad input")


@pytest.mark.parametrize("command", [["search", "zinc"], ["stats"], ["show", "p1#0-5"], ["toc", "p1", "Why?"],
                                     ["ask", "Why?"]])  # fmt: skip
def test_a_command_reading_a_corpus_refuses_a_home_that_does_not_exist(tmp_path, monkeypatch, capsys, command):
    monkeypatch.setattr("strata.pipeline.ask.ask", never_called)  # else `ask` would load the LLM to say nothing
    typo = tmp_path / "corpsu"
    assert cli.main([*command, "--store.home", str(typo)]) == 2
    assert f"no corpus at {typo} (no such folder)" in capsys.readouterr().err
    # A folder that exists but holds no corpus (the home of something else): nothing is created in it.
    assert cli.main([*command, "--store.home", str(tmp_path)]) == 2
    assert f"no corpus at {tmp_path} (no corpus.sqlite3 in it)" in capsys.readouterr().err
    assert not (tmp_path / "corpus.sqlite3").exists()
    assert not typo.exists()


def test_ask_refuses_options_with_the_text_format_instead_of_answering_them_as_multiple_choice(tmp_path, monkeypatch,
                                                                                               capsys):
    monkeypatch.setattr("strata.pipeline.ask.ask", never_called)
    monkeypatch.setattr("strata.corpus.require_corpus", lambda store: None)
    argv = ["ask", "Why?", "--options", "a", "b", "--format", "text", "--store.home", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "options make a multiple-choice question: leave the format out" in capsys.readouterr().err


def test_eval_qa_refuses_a_store_that_does_not_exist(tmp_path, capsys):
    # Checked before the dataset is read (tmp_path holds none): no question is asked of an empty store.
    typo = tmp_path / "corpsu"
    assert cli.main(["eval", "qa", "--dataset", str(tmp_path), "--store", str(typo)]) == 2
    assert f"no corpus at {typo}" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["search", "zinc", "--k"], ["toc", "p1", "Why?", "--k"], ["features", "--limit"],
                                     ["eval", "qa", "--dataset", "d", "--limit"],
                                     ["eval", "compare", "a.json", "b.json", "--permutations"]])  # fmt: skip
@pytest.mark.parametrize("count", ["0", "-3"])
def test_a_count_below_one_is_refused(capsys, command, count):
    # --k 0 searched for the default 10 papers, --k -3 for all but the last 3.
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args([*command, count])
    assert exit_info.value.code == 2
    assert f"must be a whole number of at least 1, not {count!r}" in capsys.readouterr().err


def test_serve_refuses_a_port_out_of_range(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("strata.serve.app.serve", never_called)  # it bound 99999 - 65536 = 34463
    assert cli.main(["serve", "--port", "99999", "--store.home", str(tmp_path)]) == 2
    assert "less than or equal to 65535" in capsys.readouterr().err


def test_ingest_with_ray_prints_json_when_asked(tmp_path, monkeypatch, capsys):
    report = IngestReport(files=[], parse_seconds=0.0, index_seconds=0.0, resolved_references=0)
    monkeypatch.setattr("strata.pipeline.ingest_ray.ingest_with_ray", lambda *args, **kwargs: report)
    assert cli.main(["ingest", str(tmp_path), "--ray", "--json", "--store.home", str(tmp_path / "store")]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == []


@pytest.mark.parametrize(("strict", "code"), [([], 0), (["--strict"], 1)])
def test_ingest_of_a_folder_without_supported_files_says_so(tmp_path: Path, capsys, strict: list[str], code: int):
    # It reported 0 files ok, 0 failed and exited 0: a wrong folder or format passed for a finished ingest.
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a paper")
    assert cli.main(["ingest", str(folder), "--quiet", *strict, "--store.home", str(tmp_path / "store")]) == code
    assert f"no supported files found in {folder}" in capsys.readouterr().err


def test_ctrl_c_ends_with_a_line_not_a_traceback(tmp_path: Path, monkeypatch, capsys):
    def interrupted(*args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_stats", interrupted)
    monkeypatch.setattr("strata.corpus.require_corpus", lambda store: None)
    assert cli.main(["stats", "--store.home", str(tmp_path / "store")]) == 130
    assert capsys.readouterr().err == "strata: interrupted\n"


def test_ctrl_c_during_ingest_says_how_to_index_what_was_stored(tmp_path: Path, monkeypatch, capsys):
    import strata.pipeline.ingest as ingest_module

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest_module, "ingest", interrupted)
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"_id": "a", "title": "A", "text": "Zinc."}\n')
    assert cli.main(["ingest", str(folder), "--quiet", "--store.home", str(tmp_path / "store")]) == 130
    error = capsys.readouterr().err
    assert "rerun the same `strata ingest` to index them" in error and error.endswith("strata: interrupted\n")
