"""The `strata` command line.

Every command also takes one flag per settings field (`--search.k 20`, `--llm.backend openai`), derived from the
settings tree, plus `--preset NAME`; its `--help` names only the sections it reads, `--help-all` lists every flag.
Heavy stages are imported only by the commands that need them.
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pydantic import BaseModel

from strata.config import LLM_RERANKERS, Settings, available_presets, settings_fields
from strata.store.locking import StoreBusyError

if TYPE_CHECKING:
    from strata.eval.qa import QAEvalResult
    from strata.eval.retrieval import RetrievalEvalResult
    from strata.eval.toc import TocEvalResult
    from strata.pipeline.ingest import IngestReport

Handler = Callable[[argparse.Namespace, Settings], int]


SETTING = "setting:"  # argparse dest prefix of the flags derived from the settings tree


@cache
def _setting_flags() -> dict[str, list[tuple[str, str]]]:
    """Section name -> (dotted name, help) of each of its setting flags, in settings-tree order."""
    flags: dict[str, list[tuple[str, str]]] = {name: [] for name in Settings.model_fields}
    for dotted, field in settings_fields(Settings):
        default = field.default_factory() if field.default_factory else field.default
        flags[dotted.split(".")[0]].append((dotted, f"{field.description} (default: {default})"))
    return flags


def _add_settings(parser: argparse.ArgumentParser, sections: tuple[str, ...]) -> None:
    """`--preset`, `--help-all` and every setting flag, one group per section. All flags are accepted by every
    command (so no flag a script passes breaks), but `--help` only names the `sections` the command reads."""
    flags = _setting_flags()
    # A no-break space keeps each "--name.* (count)" on one line when argparse wraps the list.
    used = ", ".join(f"--{name}.*\N{NO-BREAK SPACE}({len(flags[name])})" for name in sections) or "no section"
    group = parser.add_argument_group(
        "settings (also STRATA_SECTION__FIELD environment variables)",
        f"this command reads {used}; --help-all lists every flag with its default",
    )
    group.add_argument("--preset", help=f"named preset: {', '.join(available_presets()) or 'none yet'} or a YAML path")
    group.add_argument("--help-all", action=_HelpAll)
    for name in (*sections, *(name for name in flags if name not in sections)):
        note = "" if name in sections else " (accepted, not read by this command)"
        section = parser.add_argument_group(f"--{name}.*: {Settings.model_fields[name].description}{note}")
        for dotted, help_text in flags[name]:
            section.add_argument(f"--{dotted}", dest=f"{SETTING}{dotted}", metavar="VALUE", help=help_text)


class _CompactHelp(argparse.HelpFormatter):
    """Leaves the ~140 setting flags out of the usage line, which they would bury, and, unless `full` (`--help-all`),
    out of the listing."""

    full = False

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: Any = None) -> None:
        super().add_usage(usage, [action for action in actions if not _is_setting(action)], groups, prefix)

    def add_arguments(self, actions: Any) -> None:
        super().add_arguments([action for action in actions if self.full or not _is_setting(action)])


class _FullHelp(_CompactHelp):
    full = True


def _is_setting(action: argparse.Action) -> bool:
    return action.dest.startswith(SETTING)


class _HelpAll(argparse.Action):
    """`--help-all`: print the help with the setting flags listed, like `--help` does without them."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0,
                         help="show this help with every setting flag, its description and default, and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        parser.formatter_class = _FullHelp  # the parser exits right after, so nothing else sees the change
        parser.print_help()
        parser.exit()


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {
        key.removeprefix(SETTING): value
        for key, value in vars(args).items()
        if key.startswith(SETTING) and value is not None
    }
    return Settings.load(preset=args.preset, overrides=overrides)


def _count(text: str) -> int:
    """argparse type of a count flag (--k, --limit, --permutations): the settings' counts are validated, these are
    not; 0 or -3 meant the default or all but the last 3, and --permutations 0 failed deep inside SciPy."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _print_json(model: BaseModel | list[BaseModel]) -> None:
    if isinstance(model, list):
        print(json.dumps([item.model_dump(mode="json") for item in model], indent=2))
    else:
        print(model.model_dump_json(indent=2))


class ProgressBars:
    """`strata.progress.Progress` drawn as one tqdm bar per task on `stream`, only when it is a terminal and the
    command prints no JSON: a pipe or a log file gets the result alone."""

    def __init__(self, enabled: bool, stream: TextIO) -> None:
        self.enabled, self.stream = enabled and stream.isatty(), stream
        self._bars: dict[str, Any] = {}

    def __call__(self, task: str, done: int, total: int, detail: str = "") -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self._bars.get(task)
        if bar is None:
            bar = self._bars[task] = tqdm(total=total, desc=task, unit="", file=self.stream, dynamic_ncols=True)
        bar.total = total
        if detail:
            bar.set_postfix_str(detail[:60], refresh=False)
        bar.update(done - bar.n)
        bar.refresh()

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


@contextmanager
def progress_bars(args: argparse.Namespace) -> Iterator[ProgressBars]:
    bars = ProgressBars(not getattr(args, "json", False) and not getattr(args, "quiet", False), sys.stderr)
    try:
        yield bars
    finally:
        bars.close()


# commands


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from tqdm import tqdm

    from strata.documents.parsers import SUPPORTED_FORMATS, discover
    from strata.pipeline.ingest import ingest

    files = discover(args.paths)
    if not files:  # a mistyped folder or an unsupported format, else indistinguishable from a finished ingest
        _stderr(f"strata: no supported files found in {', '.join(args.paths)} (supported: {SUPPORTED_FORMATS})")
    if args.ray:
        from strata.pipeline.ingest_ray import ingest_with_ray

        address = None if args.ray == "local" else args.ray
        report = ingest_with_ray(files, settings, address=address, features=args.features)
    else:
        with tqdm(total=len(files), unit="file", disable=args.quiet, file=sys.stderr) as bar:

            def advance(path: Path, outcome: Any) -> None:
                bar.set_postfix_str(f"{outcome.status}: {path.name}"[:60])
                bar.update(1)

            try:
                report = ingest(files, settings, progress=advance, features=args.features)
            except KeyboardInterrupt:  # the index syncs after the last file: say how to finish it, then stop
                _stderr("strata: the papers stored so far are kept but not yet searchable: rerun the same `strata "
                        "ingest` to index them (finished files are skipped)")
                raise
    if args.json:
        _print_json(report)
    else:
        print(report.summary())
    return _ingest_status(report, args.strict)


def _ingest_status(report: IngestReport, strict: bool) -> int:
    """1 under --strict when no file was found, a file failed or a paper's features could not be extracted."""
    failed_features = report.features is not None and report.features.failed
    return 1 if strict and (not report.files or report.errors or failed_features) else 0


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from strata.corpus import Corpus

    with Corpus.open(settings) as corpus:
        ranking = corpus.searcher.search(args.query, k=args.k or settings.search.k, method=args.method, prf=args.prf)
        ranking = corpus.reranker.rank(args.query, ranking)
    if args.json:
        _print_json(ranking)
        return 0
    if not ranking.candidates:
        print("no results")
    for candidate in ranking.candidates:
        title = candidate.title or candidate.paper_id
        print(f"{candidate.rank:>2}. [{candidate.score:.4f}] {title}  ({candidate.paper_id})")
        for hit in candidate.chunks:
            where = " > ".join(hit.locator.section_path) or "-"
            page = f" p.{hit.locator.page}" if hit.locator.page else ""
            print(f"      {hit.locator}  [{hit.content_type}] {where}{page}")
            print(f"        {_snippet(hit.text)}")
    return 0


def _snippet(text: str, width: int = 200) -> str:
    """The start of a hit's text on one line. Control, format and private-use characters (unmapped PDF glyphs)
    print as nothing on a terminal, so they are dropped, and a text with nothing printable says so."""
    printable = "".join(ch for ch in text if ch.isspace() or unicodedata.category(ch) not in _UNPRINTABLE)
    flat = " ".join(printable.split()) or "(no printable text)"
    return flat if len(flat) <= width else flat[: width - 1] + "…"


_UNPRINTABLE = {"Cc", "Cf", "Co", "Cs", "Cn"}


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    from strata.corpus import Corpus
    from strata.documents.model import Locator

    locator = Locator.parse(args.locator)
    with Corpus.open(settings) as corpus:
        located, text = corpus.store.locate(locator)
        title = corpus.store.paper_summaries([located.paper_id])[located.paper_id].title
    if args.json:
        print(json.dumps({"locator": str(located), "title": title, "section_path": located.section_path,
                          "page": located.page, "text": text}, indent=2))
        return 0
    print(f"{title}  ({located.paper_id})")
    print(f"section: {' > '.join(located.section_path) or '-'}   page: {located.page or '-'}   chars "
          f"{located.char_start}-{located.char_end}")
    print()
    print(text)
    return 0


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from strata.corpus import Corpus

    with Corpus.open(settings) as corpus:
        stats = corpus.store.stats()
    if args.json:
        _print_json(stats)
        return 0
    for name, value in stats.model_dump().items():
        print(f"{name:>20}: {value}")
    return 0


def eval_retrieval(args: argparse.Namespace, settings: Settings) -> RetrievalEvalResult:
    from strata.eval.retrieval import run_retrieval_eval

    with progress_bars(args) as bars:
        return run_retrieval_eval(
            settings, dataset_dir=Path(args.dataset), method=args.method, split=args.split,
            output_dir=Path(args.output), progress=bars,
        )


def eval_toc(args: argparse.Namespace, settings: Settings) -> TocEvalResult:
    from strata.eval.toc import run_toc_eval

    with progress_bars(args) as bars:
        return run_toc_eval(
            settings, Path(args.dataset), args.method, book=args.book,
            adapter=Path(args.adapter) if args.adapter else None, output_dir=Path(args.output), progress=bars,
        )


def eval_qa(args: argparse.Namespace, settings: Settings) -> QAEvalResult:
    from strata.eval.qa import run_qa_eval

    with progress_bars(args) as bars:
        return run_qa_eval(
            settings, Path(args.dataset), split=args.split, limit=args.limit, output_dir=Path(args.output),
            store_home=Path(args.store) if args.store else None, progress=bars,
        )


def cmd_eval_task(args: argparse.Namespace, settings: Settings) -> int:
    """`strata eval retrieval|toc|qa`: run the evaluation the subcommand names (`evaluate`) and print its result with
    its module's formatter (`formatter`, imported only now: the eval modules pull in heavy stages)."""
    import importlib

    result = args.evaluate(args, settings)
    if args.json:
        _print_json(result)
    else:
        module, name = args.formatter
        print(getattr(importlib.import_module(module), name)(result))
    return 0


def cmd_eval_matrix(args: argparse.Namespace, settings: Settings) -> int:
    from strata.eval.matrix import format_matrix, load_matrix, run_matrix, write_matrix_result

    output = Path(args.output).resolve()  # the rows run from the matrix root, not from here
    with progress_bars(args) as bars:
        spec = load_matrix(Path(args.file))
        result = run_matrix(spec, run_matrix_command, rows=args.rows, matrix_file=args.file, progress=bars)
    write_matrix_result(result, output)
    if args.json:
        _print_json(result)
    else:
        print(format_matrix(result))
        print(f"written to {output}")
    return 0 if result.passed else 1


def run_matrix_command(argv: list[str]) -> dict[str, float]:
    """Run one `strata eval` command of the matrix in-process and return its mean metrics. Evaluation commands
    name the function that computes their result (`evaluate`); its result carries `metrics`."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as error:  # argparse has printed why
        raise ValueError(f"'strata {' '.join(argv)}' is not a valid command") from error
    evaluate = getattr(args, "evaluate", None)
    if evaluate is None:
        raise ValueError(f"'strata {' '.join(argv)}' is not an evaluation the matrix can run")
    from strata.eval.results import command_line

    with command_line(["strata", *argv]):  # the row's result file names the row's command, not the matrix's
        return dict(evaluate(args, settings_from_args(args)).metrics)


def cmd_eval_compare(args: argparse.Namespace, settings: Settings) -> int:
    from strata.eval.compare import compare, format_comparison

    chosen = {name: getattr(args, name) for name in ("permutations", "seed") if getattr(args, name) is not None}
    result = compare(Path(args.baseline), Path(args.system), args.metric, **chosen)
    if args.json:
        _print_json(result)
    else:
        print(format_comparison(result))
    return 0


def cmd_toc(args: argparse.Namespace, settings: Settings) -> int:
    from strata.toc.query import format_toc_answer, run_toc_query

    answer = run_toc_query(settings, args.document, args.question, k=args.k)
    if args.json:
        _print_json(answer)
    else:
        print(format_toc_answer(answer))
    return 0


def cmd_ask(args: argparse.Namespace, settings: Settings) -> int:
    from typing import get_args

    from strata.pipeline.ask import ask, requested_format
    from strata.read.model import StageName

    stages = list(get_args(StageName))

    def show_trace(event: Any) -> None:
        print(f"[{event.elapsed_s:6.1f}s] {event.stage} {event.status} {event.detail}", file=sys.stderr)

    answer_format = requested_format(args.options, args.format)
    with progress_bars(args) as bars:

        def show_stage(event: Any) -> None:  # on a terminal: which stage of the question is under way
            done = stages.index(event.stage) + (event.status != "started")
            bars("stages", done, len(stages), f"{event.stage}: {event.detail}" if event.detail else event.stage)

        result = ask(
            args.question, settings, options=args.options, answer_format=answer_format,
            on_event=show_trace if args.trace else show_stage,
        )
    if args.json:
        _print_json(result)
        return 0
    from strata.read.format import format_ask_result

    print(format_ask_result(result, trace=args.trace))
    return 1 if result.partial else 0


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from strata.serve.app import serve

    chosen = {name: getattr(args, name) for name in ("host", "port") if getattr(args, name) is not None}
    # Validated like --serve.port: a copy with the values put in unchecked bound port 99999 as 99999 - 65536.
    checked = type(settings.serve).model_validate(settings.serve.model_dump() | chosen)
    serve(settings.model_copy(update={"serve": checked}))
    return 0


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from strata.serve.mcp_server import run_stdio

    run_stdio(settings)
    return 0


def cmd_llm_check(args: argparse.Namespace, settings: Settings) -> int:
    from strata.llm.check import format_check, run_check

    report = run_check(settings)
    if args.json:
        _print_json(report)
    else:
        print(format_check(report))
    return 0


def cmd_features(args: argparse.Namespace, settings: Settings) -> int:
    from strata.corpus import Corpus
    from strata.rerank.factory import extract_features

    with Corpus.open(settings) as corpus, progress_bars(args) as bars:
        wanted = args.papers or None
        report = extract_features(settings, corpus.store, corpus.llm, paper_ids=wanted, limit=args.limit, progress=bars)
    if args.json:
        _print_json(report)
    else:
        print(report.summary())
    return 1 if report.failed else 0


def cmd_train_reranker(args: argparse.Namespace, settings: Settings) -> int:
    from strata.train.cross_encoder import train_cross_encoder
    from strata.train.pairs import writes_queries

    return _train(args, settings, lambda corpus, log, bars: train_cross_encoder(
        corpus, corpus.llm if writes_queries(settings.rerank) else None, log=log, progress=bars))


def cmd_tune_reranker(args: argparse.Namespace, settings: Settings) -> int:
    from strata.train.fusion import tune_reranker

    return _train(args, settings, lambda corpus, log, bars: tune_reranker(corpus, corpus.llm, args.method, bars))


def cmd_train_query_encoder(args: argparse.Namespace, settings: Settings) -> int:
    from strata.train.query_encoder import train_query_encoder

    return _train(args, settings, lambda corpus, log, bars: train_query_encoder(corpus, log=log, progress=bars))


def _train(args: argparse.Namespace, settings: Settings, train: Callable[..., Any]) -> int:
    """Run a trainer over the corpus with progress bars and its log on stderr; print its report (JSON or summary)."""
    from strata.corpus import Corpus

    with Corpus.open(settings) as corpus, progress_bars(args) as bars:
        report = train(corpus, (lambda line: None) if args.json else _stderr, bars)
    if args.json:
        _print_json(report)
    else:
        print(report.summary())
    return 0


def cmd_train_toc(args: argparse.Namespace, settings: Settings) -> int:
    from strata.train.toc import train_toc_adapter

    try:
        with progress_bars(args) as bars:
            report, folder = train_toc_adapter(settings, args.document, log=_stderr, progress=bars)
    except RuntimeError as error:  # a failed stage (e.g. no questions could be generated), already explained
        print(f"strata: error: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"adapter": str(folder), **report.model_dump(mode="json")}, indent=2))
    else:
        print(f"STAIR adapter saved to {folder}: {report.train_examples} synthetic questions, {report.steps} steps "
              f"in {report.seconds:.0f}s on {report.device}, best dev R@1 {report.best_dev_r1:.3f} at step "
              f"{report.best_step}; `strata toc` answers with it from now on")
    return 0


# parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="strata", description="Evidence-grounded search over scientific papers")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, handler: Handler, help_text: str, group: Any = commands, *, reads: tuple[str, ...],
        corpus: bool = False,
    ) -> argparse.ArgumentParser:
        """Register a command; `reads` names the settings sections its code reads (its `--help` lists those);
        `corpus`: it only reads an existing corpus, so a store home that does not exist is an error."""
        sub = group.add_parser(name, help=help_text, formatter_class=_CompactHelp)
        sub.set_defaults(handler=handler, reads_corpus=corpus)
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        _add_settings(sub, reads)
        return sub

    # What answering a question reads: the search stack, the Lit3R stages, the LLM, and ToC induction for cited
    # sections of papers without an outline.
    answering = ("store", "index", "search", "llm", "toc", "retrieve", "relate", "rerank", "read")

    # llm and rerank: --features extracts CoRank features with the LLM.
    ingest_reads = ("parsing", "store", "index", "llm", "rerank")
    ingest_cmd = command("ingest", cmd_ingest, "parse, store and index files or folders", reads=ingest_reads)
    ingest_cmd.add_argument("paths", nargs="+", help="files or folders (PDF, S2ORC, TEI, JATS, unarXive, BEIR, book)")
    ingest_cmd.add_argument("--quiet", action="store_true", help="no progress bar")
    ingest_cmd.add_argument("--strict", action="store_true", help="exit 1 when any file failed or none was found")
    ingest_cmd.add_argument(
        "--ray", nargs="?", const="local", metavar="ADDRESS",
        help="parse and embed as Ray Data pipelines: on a local Ray instance, or the cluster at ADDRESS ('auto', "
        "'ray://host:10001'); results land in the same store",
    )
    ingest_cmd.add_argument(
        "--features", action="store_true",
        help="also extract CoRank's compact features of papers without current ones (on Ray workers with --ray)",
    )

    # llm: the listwise rerank methods.
    search_reads = ("store", "index", "search", "llm", "rerank")
    search_help = "hybrid search: papers with their best passages and locators"
    search_cmd = command("search", cmd_search, search_help, reads=search_reads, corpus=True)
    search_cmd.add_argument("query")
    search_cmd.add_argument("--k", type=_count, help="papers to return (default: search.k)")
    search_cmd.add_argument("--method", choices=["bm25", "dense", "hybrid"], default="hybrid")
    search_cmd.add_argument("--prf", action=argparse.BooleanOptionalAction, default=None,
                            help="pseudo-relevance feedback (default: search.prf)")

    show_cmd = command("show", cmd_show, "print the exact text a locator names", reads=("store",), corpus=True)
    show_cmd.add_argument("locator", help="PAPER_ID#START-END as printed by search")

    command("stats", cmd_stats, "corpus counts", reads=("store",), corpus=True)

    # index: the embedder that induces a ToC for a document without an outline.
    toc_reads = ("store", "index", "llm", "toc")
    toc_help = "the leaf section of a document's ToC that answers a question"
    toc_cmd = command("toc", cmd_toc, toc_help, reads=toc_reads, corpus=True)
    toc_cmd.add_argument("document", help="id of an ingested paper or book")
    toc_cmd.add_argument("question")
    toc_cmd.add_argument("--k", type=_count, help="leaves to return (default: toc settings)")

    train_toc_help = "fine-tune the STAIR adapter `strata toc` answers with"
    train_toc_cmd = command("train-toc", cmd_train_toc, train_toc_help, reads=toc_reads, corpus=True)
    train_toc_cmd.add_argument("document", help="id or title of an ingested paper or book")

    ask_help = "answer a question from the corpus with numbered, validated citations"
    ask_cmd = command("ask", cmd_ask, ask_help, reads=answering, corpus=True)
    ask_cmd.add_argument("question")
    ask_cmd.add_argument("--options", nargs="+", help="answer options of a multiple-choice question")
    formats = ["text", "mc", "table"]
    ask_cmd.add_argument("--format", choices=formats, help="answer format (default: mc with --options, else text)")
    ask_cmd.add_argument("--trace", action="store_true", help="print stage progress and every LLM call with tokens")

    serve_help = "HTTP API and web page (beyond loopback only with serve.token)"
    serve_cmd = command("serve", cmd_serve, serve_help, reads=tuple(Settings.model_fields))  # POST /ingest: parsing
    serve_cmd.add_argument("--host", help="address to bind (default: serve.host, 127.0.0.1)")
    serve_cmd.add_argument("--port", type=int, help="port to bind (default: serve.port)")

    mcp_help = "MCP server over stdio: tools search, ask, toc, read_section"
    command("mcp", cmd_mcp, mcp_help, reads=(*answering, "serve"), corpus=True)

    eval_cmd = commands.add_parser("eval", help="evaluation").add_subparsers(dest="eval_command", required=True)
    retrieval_reads = ("parsing", "store", "index", "search")
    retrieval = command("retrieval", cmd_eval_task, "BEIR-format retrieval evaluation", eval_cmd, reads=retrieval_reads)
    retrieval.add_argument("--dataset", required=True, help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/")
    retrieval.add_argument("--method", choices=["bm25", "dense", "hybrid"], default="hybrid")
    retrieval.add_argument("--split", default="test", help="qrels split")
    retrieval.add_argument("--output", default="runs", help="folder for the TREC run and JSON result")
    retrieval.set_defaults(evaluate=eval_retrieval, formatter=("strata.eval.retrieval", "format_result"))

    toc_help = "ToC retrieval on OpenStax ToC-QA: R@1, R@3, nDCG@3, hallucination"
    toc_eval = command("toc", cmd_eval_task, toc_help, eval_cmd, reads=("parsing", "index", "llm", "toc"))
    toc_eval.add_argument("--dataset", required=True, help="OpenStax ToC-QA folder (books with derived/), or one book")
    toc_eval.add_argument("--book", help="evaluate only this book (folder name; default: every book)")
    toc_eval.add_argument("--method", choices=["bm25", "dense", "llm", "llm-free", "stair", "dsi"], default="bm25",
                          help="llm: zero-shot, trie-constrained; llm-free: zero-shot free generation")
    toc_eval.add_argument("--adapter", help="saved LoRA adapter folder (stair, dsi)")
    toc_eval.add_argument("--output", default="runs", help="folder for the predictions JSONL and JSON result")
    toc_eval.set_defaults(evaluate=eval_toc, formatter=("strata.eval.toc", "format_toc_result"))

    qa_help = "question answering with `ask`: MC accuracy, cited gold papers, evidence overlap"
    qa = command("qa", cmd_eval_task, qa_help, eval_cmd, reads=("parsing", *answering))  # ingests, then asks
    qa.add_argument("--dataset", required=True, help="LitQA2 folder (questions.jsonl, pdfs/) or SciFact original")
    qa.add_argument("--split", help="SciFact claims split (default dev)")
    qa.add_argument("--limit", type=_count, help="evaluate only the first N questions")
    qa.add_argument("--store", help="existing store home that already holds the corpus (read only; default: ingest)")
    qa.add_argument("--output", default="runs", help="folder for the predictions JSONL and JSON result")
    qa.set_defaults(evaluate=eval_qa, formatter=("strata.eval.qa", "format_qa_result"))

    matrix_help = "rerun the reproduction matrix (each row carries its own flags); exit 1 when a score drifts"
    matrix = command("matrix", cmd_eval_matrix, matrix_help, eval_cmd, reads=())  # rows parse their own flags
    matrix.add_argument("--rows", choices=["cheap", "all"], default="cheap", help="cheap: rows that need no LLM")
    matrix.add_argument("--file", default="benchmarks/matrix.yaml", help="the matrix YAML")
    matrix.add_argument("--output", default="benchmarks/results/matrix.json", help="where the outcome JSON goes")

    compare_help = "paired randomization test between two result files"
    comparison = command("compare", cmd_eval_compare, compare_help, eval_cmd, reads=())
    comparison.add_argument("baseline", help="result JSON of the baseline")
    comparison.add_argument("system", help="result JSON of the system")
    comparison.add_argument("--metric", default="nDCG@10", help="per-query metric to compare")
    comparison.add_argument("--permutations", type=_count, help="random sign flips (default 10,000)")
    comparison.add_argument("--seed", type=int, help="random seed, recorded in the result")

    features_help = "extract CoRank's compact features (cached by content hash)"
    features_reads = ("store", "index", "llm", "rerank")
    features_cmd = command("features", cmd_features, features_help, reads=features_reads, corpus=True)
    features_cmd.add_argument("papers", nargs="*", help="paper ids (default: the whole corpus)")
    features_cmd.add_argument("--limit", type=_count, help="only the first N papers by id")
    train_reranker_help = "train the cross-encoder on synthetic queries over the corpus"
    train_reranker_reads = ("store", "index", "search", "llm", "rerank")  # the LLM writes the synthetic queries
    command("train-reranker", cmd_train_reranker, train_reranker_help, reads=train_reranker_reads, corpus=True)
    tune_help = ("choose an LLM reranker's fusion weight with the first stage on LLM-written queries of sampled "
                 "papers (0 when it does not help: search then keeps the first-stage order)")
    tune_reads = ("store", "index", "search", "llm", "rerank")
    tune_cmd = command("tune-reranker", cmd_tune_reranker, tune_help, reads=tune_reads, corpus=True)
    tune_cmd.add_argument("--method", required=True, choices=LLM_RERANKERS, help="the LLM reranker to measure")
    query_encoder_help = "adapt the dense query encoder to the corpus (its documents' vectors stay as indexed)"
    query_encoder_reads = ("store", "index", "relate", "rerank")
    command("train-query-encoder", cmd_train_query_encoder, query_encoder_help, reads=query_encoder_reads, corpus=True)

    llm_cmd = commands.add_parser("llm", help="LLM layer").add_subparsers(dest="llm_command", required=True)
    check_help = "load the configured model and check it returns valid JSON"
    command("check", cmd_llm_check, check_help, llm_cmd, reads=("llm",))
    return parser


def main(argv: list[str] | None = None) -> int:
    from strata.eval.results import command_line

    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
        if args.reads_corpus:
            from strata.corpus import require_corpus

            require_corpus(settings.store)
        with command_line(["strata", *argv]):  # what result files record as the command that wrote them
            return args.handler(args, settings)
    except (ValueError, KeyError, FileNotFoundError, StoreBusyError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"strata: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what was finished is kept; a traceback would only bury that
        print("strata: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as shells report it


if __name__ == "__main__":
    sys.exit(main())
