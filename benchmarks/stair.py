"""STAIR table-of-contents retrieval on OpenStax ToC-QA (psychology-2e, introduction-sociology-3e).

    python benchmarks/stair.py cpu [--parts full,zero-shot,zero-shot-small,small,overall] [--small-books A,B]
    python benchmarks/stair.py prepare-gpu [--scope small|full] [--folder .stair_gpu]
    python benchmarks/stair.py gpu --plan .stair_gpu/plan.json --model MODEL.gguf --out DIR [--budget-s 90]
    python benchmarks/stair.py collect --runs DIR [--plan .stair_gpu/plan.json]

`cpu` measures what this machine can: BM25 and dense over leaf text on all 1,146 questions (`full`); the zero-shot
LLM (embedded llama.cpp, trie-constrained and free) on a fixed sample of questions per whole book (`zero-shot`) or
on the small books' test questions (`zero-shot-small`); and the whole STAIR recipe (synthetic questions, STAIR and
DSI LoRA training with early stopping on dev R@1 within a wall-time budget, evaluation, paired randomization test)
on a small book per book: the three chapters after its introductory one, on a fixed sample of their questions
(`small`; sizes in SMALL_BOOKS, CPU_SMALL_SETTINGS, CPU_TRAIN_BUDGET_S, CPU_SMALL_TEST_SAMPLE; about 60 minutes
for psychology's on 2 cores with the 0.5B, 30 with SmolLM2-135M via `--train-model`). `small` then pools the small
books (`overall`: pool again without training) into one table with the paired tests over all their questions. Each
part is merged into the results file as it finishes, so parts and books can run as separate processes (e.g. one
`--small-books` per core). `prepare-gpu` writes everything a lent GPU needs into an ignored folder (a plan of
jobs: by default each small book on the CPU's 24-over-8 recipe, or `--scope full` both whole books; the model split
into parts under the 64 MiB transfer limit; wheels); `benchmarks/stair_gpu.sh` runs `gpu` there, which sends back
runs.json and the STAIR adapters; `collect` scores the runs and ranks with the adapters on this CPU (fused and
alone). Gold is a section (module); a predicted leaf matches when the gold
path is a prefix of its path (strata.eval.toc). Results:
benchmarks/results/stair-cpu.json, stair-gpu.json (strata.eval.results), per-query files in benchmarks/results/stair/
(result files `strata.eval.compare` reads), and the tables as benchmarks/RESULTS.md shows them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
sys.path.insert(0, str(REPO / "src"))  # the device machine runs from a bare copy of the tree

DATA = REPO.parent / "shared" / "data" / "openstax-toc-qa"
DATASET_NAME = "openstax-toc-qa"
BOOKS = ("psychology-2e", "introduction-sociology-3e")
RESULTS = ROOT / "results"
PER_QUERY = RESULTS / "stair"
GPU_FOLDER = REPO / ".stair_gpu"
SEED = 20261130
PERMUTATIONS = 10_000
K = 3
# A small book per book: the three chapters after its introductory one (a ToC one CPU core can train on).
SMALL_BOOKS = {
    "psychology-2e": ("Psychological Research", "Biopsychology", "States of Consciousness"),
    "introduction-sociology-3e": ("Sociological Research", "Culture", "Society and Social Interaction"),
}
PART_BYTES = 48 * 1024 * 1024  # each device call carries under its 64 MiB limit: the 0.5B (469 MiB) is 10 parts
RETURN_BYTES = 15 * 1024 * 1024  # each file the device sends back is under 16 MiB
# Not in the device image (KINDS.md): strata's typed models and the GGUF reader transformers needs.
GPU_WHEELS = (
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "pydantic-settings==2.16.3",
    "annotated-types==0.7.0",
    "typing-inspection==0.4.5",
    "python-dotenv==1.2.1",
    "gguf==0.19.0",
)
# The settings the small-book results are measured with: the packaged 0.5B model (the zero-shot baseline's) as the
# base, 16 questions per step on the ToC the base model reads (toc.adapt_toc off: the ToC's cache is computed once),
# one dev check per epoch, patience 3 (STAIR: patience on dev R@1, not a clock); the wall budget only ends a run that
# patience has not.
CPU_SMALL_SETTINGS = {
    "toc.train_model": "packaged:qwen2.5-coder-0.5b",
    "toc.batch_size": 16,
    "toc.learning_rate": 5e-4,  # a few epochs of ~16 steps: a larger step than the 3e-4 default
    "toc.max_epochs": 20,  # ~2.7 min an epoch on 2 cores (psychology's 236 questions), its dev check included
    "toc.patience": 3,
    "toc.threads": 2,
}
CPU_TRAIN_BUDGET_S = 3600.0  # wall seconds per adapter
CPU_DEV_LIMIT = 45  # dev questions per training check (about 1 per leaf; each costs ~3 s, checked every epoch)
CPU_BATCH = 8  # questions per forward pass after the cached ToC (toc.dev_batch: 1.6x faster dev checks on 2 cores)
ADAPTERS = RESULTS / "tmp" / "stair-adapters"  # ignored: the fused retriever loads the STAIR adapter back
# Committed: the synthetic questions the small-book rows were trained on (the LLM writes them once, ~12 min a book),
# so a rerun trains on the same questions and a later session need not write them again; prepare-gpu ships them.
QUESTIONS = {"toc.question_cache": str(RESULTS / "toc-questions")}
CPU_SMALL_TEST_SAMPLE = 60
CPU_PARTS = ("full", "full-fused", "zero-shot", "zero-shot-small", "questions", "small", "overall")
FUSED = "stair-fused"
STAIR_HERE = "stair-on-cpu"  # a GPU-trained adapter ranking alone on this CPU
CHECKPOINT_EVERY = 5  # zero-shot LLM questions between partial writes of the results
# Sized for one device call (at most 600 s): two adapters of --budget-s each plus generation and ranking.
GPU_SETTINGS = {
    "toc.batch_size": 8,
    "toc.learning_rate": 5e-4,  # few epochs fit the budget, so a larger step than the 3e-4 default
    "toc.max_epochs": 12,
    "toc.patience": 3,
    "toc.eval_every_steps": 150,
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- data


def load_book(name: str):
    from strata.config import Settings
    from strata.documents.parsers import iter_papers
    from strata.eval.toc import load_toc_queries

    folder = DATA / name / "derived"
    (paper,) = list(iter_papers(folder, Settings.load().parsing))
    return paper, load_toc_queries(folder)


def chapter_subset(paper, queries, chapters: tuple[str, ...]):
    """The book cut to some chapters (a small book): its sections, chunks and questions; numbering restarts."""
    sections = [section for section in paper.sections if section.title in chapters]
    chunks = [chunk for chunk in paper.chunks if chunk.section_path[:1] and chunk.section_path[0] in chapters]
    small = paper.model_copy(update={"sections": sections, "chunks": chunks})
    return small, [query for query in queries if query.gold_path[0] in chapters]


def llm_sample(queries, size: int):
    """A fixed sample per book for the slow LLM methods on this CPU (seed SEED), in the file's order."""
    if size >= len(queries):
        return list(queries)
    chosen = set(random.Random(SEED).sample(range(len(queries)), size))
    return [query for index, query in enumerate(queries) if index in chosen]


# --- scoring and files


def score(method: str, scope: str, queries, rankings, tag: str):
    from strata.eval.toc import score_rankings, summarise

    return record(summarise(method, scope, score_rankings(queries, rankings)), tag)


def record(result, tag: str, command: str | None = None):
    """The per-query file of a method's result (what strata.eval.compare reads), logged, as measured by `command`
    (None: this run); the result, its file and that command."""
    from strata.eval.results import new_result, write_result
    from strata.eval.toc import toc_experiment

    path = PER_QUERY / f"{tag}-{result.scope}-{result.method}.json"
    experiment = toc_experiment(result, path.stem, DATASET_NAME, tag).model_copy(update={"command": command})
    written = new_result("benchmarks/stair.py", [experiment], datasets=[dataset_ref()])
    write_result(written, path)
    log(f"{tag} {result.scope} {result.method}: " + ", ".join(f"{k} {v:.3f}" for k, v in result.metrics.items()))
    return result, path, written.experiments[0].command


def cell(result, path: Path, command: str | None) -> dict:
    """A method's numbers on one scope as a part holds them, with the command that measured them: merges and later
    runs carry it as it is (None: not recorded)."""
    return {
        "queries": result.queries,
        "metrics": result.metrics,
        "latency_ms_mean": result.latency_ms_mean,
        "latency_ms_p50": result.latency_ms_p50,
        "per_query_file": str(path.relative_to(REPO)),
        "command": command,
    }


def by_scope(method: str, queries, rankings, tag: str) -> dict:
    """Metrics over all questions and per book; the per-query file of 'all' is what comparisons use."""
    entry = {}
    for scope in ("all", *sorted({q.book for q in queries})):
        chosen = [i for i, q in enumerate(queries) if scope in ("all", q.book)]
        entry[scope] = cell(*score(method, scope, [queries[i] for i in chosen], [rankings[i] for i in chosen], tag))
    return entry


def paired_tests(methods: dict, system: str, metric: str = "R@1") -> list[dict]:
    """STAIR against the best other method on the same questions, and against DSI (the paper's test)."""
    others = {name: entry for name, entry in methods.items()
              if name not in (system, FUSED, STAIR_HERE) and "all" in entry}  # fmt: skip
    if system not in methods or not others:
        return []
    best = max(others, key=lambda name: (others[name]["all"]["metrics"][metric], name))
    return [
        {"system": system, "baseline": baseline, "best_baseline": baseline == best,
         **paired(methods, system, baseline, metric)}
        for baseline in dict.fromkeys([best, "dsi"])
        if baseline in others
    ]


def paired(methods: dict, system: str, baseline: str, metric: str) -> dict:
    """The paired randomization test of `system` against `baseline` over all their questions."""
    return paired_files(methods[baseline]["all"], methods[system]["all"], metric)


def paired_files(baseline: dict, system: dict, metric: str) -> dict:
    """The paired randomization test between two cells' per-query files."""
    from strata.eval.compare import compare

    result = compare(REPO / baseline["per_query_file"], REPO / system["per_query_file"], metric,
                     permutations=PERMUTATIONS, seed=SEED)
    return result.model_dump(exclude={"per_query_delta"})


def compare_recipes():
    """Every small book trained on another recipe, its paired tests against the book's default part (measured then
    or since; a GPU-trained part also against its recipe's CPU part) added again; the results file as written, or
    None when it has no such part."""
    from strata.eval.results import load_result

    path = RESULTS / "stair-cpu.json"
    written = load_result(path) if path.is_file() else None
    described = written.details.get("parts", {}) if written else {}
    others = {key: part for key, part in described.items()
              if part.get("kind") == "small-book" and key != f"small_{part['book']}"}
    for key, part in others.items():
        methods = methods_of(written, key)
        kept = [test for test in part.get("comparisons", []) if "baseline_part" not in test]
        # The book's default part, and for a part trained on a GPU its recipe's CPU part too (the same questions)
        twins = dict.fromkeys([f"small_{part['book']}", key.removesuffix("-gpu").replace("-adapttoc", "")])
        tests = [test for twin in twins if twin in described and twin != key
                 for test in recipe_tests(twin, methods_of(written, twin), methods)]  # fmt: skip
        written = write_results("stair-cpu.json", {key: {**part, "methods": methods, "comparisons": kept + tests}})
    return written if others else None


def recipe_tests(default_part: str, default: dict, methods: dict, metric: str = "R@1") -> list[dict]:
    """A small book trained on another recipe (base model, questions) against the book's default part's methods
    `default`, for each trained method both measured (the leaf baselines read no training data: the same in
    both)."""
    return [
        {"system": method, "baseline": method, "baseline_part": default_part,
         **paired_files(default[method]["all"], methods[method]["all"], metric)}
        for method in ("stair", "dsi", FUSED)
        if method in methods and "all" in default.get(method, {})
    ]


def dataset_ref():
    from strata.eval.results import DatasetRef, repo_relative

    return DatasetRef(name=DATASET_NAME, path=repo_relative(DATA, REPO), split="test")


def part_experiments(key: str, part: dict) -> list:
    """A part's cells (method -> scope -> cell) as experiments of the results file; `methods_of` inverts it."""
    from strata.eval.results import Experiment

    return [
        Experiment(
            name=f"{key}/{method}/{scope}", method=method, dataset=DATASET_NAME, subset=scope, group=key,
            queries=cell["queries"], metrics=cell["metrics"],
            cost={"latency_ms_mean": cell["latency_ms_mean"], "latency_ms_p50": cell["latency_ms_p50"]},
            per_query=cell["per_query_file"],
            command=cell["command"],
        )
        for method, scopes in part["methods"].items()
        for scope, cell in scopes.items()
    ]  # fmt: skip


def methods_of(result, group: str) -> dict:
    """The cells of a part of a results file, by method and scope, as the part was built."""
    methods: dict = {}
    for e in result.experiments:
        if e.group == group:
            cell = {"queries": e.queries, "metrics": e.metrics, **e.cost, "per_query_file": e.per_query,
                    "command": e.command}  # fmt: skip
            methods.setdefault(e.method, {})[e.subset] = cell
    return methods


def write_results(name: str, parts: dict):
    """Merged into the file as it is now: parts run by separate processes (or earlier runs) keep theirs, a part
    measured again replaces all of its experiments. The read-merge-write holds a lock and replaces the file whole, so
    concurrent parts neither lose nor tear it."""
    from strata.eval.results import merged, new_result, update_result

    # Rows set after new_result, which gives each row without a command this run's: parts also hold rows read back
    # from the file (re-tested, pooled), and one whose command went unrecorded stays so.
    rows = [experiment for key, part in parts.items() for experiment in part_experiments(key, part)]
    this_run = new_result("benchmarks/stair.py", datasets=[dataset_ref()], settings={"k": K, "seed": SEED})
    this_run = this_run.model_copy(update={"experiments": rows})

    def merge(earlier):
        kept = earlier and earlier.model_copy(
            update={"experiments": [e for e in earlier.experiments if e.group not in parts]}
        )
        described = {key: {k: v for k, v in part.items() if k != "methods"} for key, part in parts.items()}
        details = {"parts": (earlier.details.get("parts", {}) if earlier else {}) | described}
        return merged(kept, this_run).model_copy(update={"details": details})

    result = update_result(RESULTS / name, merge)
    log(f"wrote {RESULTS / name}")
    return result


def drop_part(name: str, key: str):
    """The results file without part `key` (its experiments and description), when it has one."""
    from strata.eval.results import update_result

    def without(earlier):
        parts = {k: v for k, v in earlier.details.get("parts", {}).items() if k != key}
        kept = [e for e in earlier.experiments if e.group != key]
        return earlier.model_copy(update={"experiments": kept, "details": {**earlier.details, "parts": parts}})

    path = RESULTS / name
    if not path.is_file():
        return None
    log(f"dropping part {key} from {path}")
    return update_result(path, without)


def print_tables(name: str, result) -> None:
    from report import toc_sections  # benchmarks/report.py (this folder is on sys.path)

    print("\n" + toc_sections({name: result}))


# --- cpu


def run_cpu(args: argparse.Namespace) -> None:
    from strata.config import Settings
    from strata.toc.tree import document_toc

    parts = set(args.parts.split(","))
    if parts - set(CPU_PARTS):
        raise SystemExit(f"unknown parts {sorted(parts - set(CPU_PARTS))}; choose from {', '.join(CPU_PARTS)}")
    small_names = args.small_books.split(",")
    modes = tuple(args.modes.split(","))
    if set(modes) - {"stair", "dsi"}:
        raise SystemExit(f"unknown modes {sorted(set(modes) - {'stair', 'dsi'})}; choose from stair, dsi")
    if set(small_names) - set(SMALL_BOOKS):
        raise SystemExit(f"unknown small books {sorted(set(small_names) - set(SMALL_BOOKS))}; choose from "
                         f"{', '.join(SMALL_BOOKS)}")
    settings = Settings.load(overrides=QUESTIONS)
    books = {name: load_book(name) for name in BOOKS}
    written = None
    if "full" in parts:
        written = write_results("stair-cpu.json", {"full_books": full_book_baselines(books, settings)})
    # The zero-shot parts on another LLM (e.g. the 1.5B) are reported beside the default model's, under their own key.
    zero_settings, zero_suffix = settings, ""
    if args.zero_shot_model:
        zero_settings = Settings.load(overrides=QUESTIONS | {"llm.model": args.zero_shot_model})
        zero_suffix = "-" + args.zero_shot_model.removeprefix("packaged:").replace("/", "_")
    if "full-fused" in parts:
        key = f"full_books_fused{zero_suffix}"
        small_settings = Settings.load(overrides=QUESTIONS | small_overrides(args))
        tag = f"full-fused{zero_suffix}"
        fused = full_books_fused(books, settings, zero_settings, small_settings, args.llm_sample, tag)
        written = write_results("stair-cpu.json", {key: fused})
    if "zero-shot" in parts:
        sets = [(document_toc(paper), llm_sample(queries, args.llm_sample)) for paper, queries in books.values()]
        part = {"kind": "zero-shot", "sample": {"questions": args.llm_sample, "seed": SEED}}
        key = f"zero_shot_llm{zero_suffix}"
        ranked = zero_shot_llm(sets, zero_settings, part, f"sample{zero_suffix}", key)
        written = write_results("stair-cpu.json", {key: ranked})
    if "zero-shot-small" in parts:
        sets = []
        for name in small_names:
            paper, _, chosen = small_test_set(books, name)
            sets.append((document_toc(paper), llm_sample(chosen, args.llm_sample)))
        part = {
            "kind": "zero-shot-small",
            "sample": {
                "questions": min(args.llm_sample, CPU_SMALL_TEST_SAMPLE), "of": CPU_SMALL_TEST_SAMPLE, "seed": SEED
            },
            "chapters": {name: list(SMALL_BOOKS[name]) for name in small_names},
        }
        key = f"zero_shot_llm_small_book{zero_suffix}"
        ranked = zero_shot_llm(sets, zero_settings, part, f"small-sample{zero_suffix}", key)
        written = write_results("stair-cpu.json", {key: ranked})
    if "questions" in parts:
        small_settings = Settings.load(overrides=QUESTIONS | small_overrides(args))
        for name in small_names:
            toc = document_toc(small_test_set(books, name)[0])
            _, questions, seconds = small_book_questions(toc, settings, small_settings)
            log(f"{name}: {sum(map(len, questions.values()))} questions for {len(questions)} of {len(toc.leaves())} "
                f"leaves cached ({seconds:.0f} s this run)")
    if "small" in parts:
        overrides = small_overrides(args)
        for name in small_names:
            key = small_key(name, overrides)
            part = small_book(books, name, key, settings, args.train_budget_s, overrides, modes, args.reuse_adapters)
            written = write_results("stair-cpu.json", {f"small_{key}": part})
    if parts & {"small", "overall"}:
        written = pool_small_books(written)
    if written:
        print_tables("stair-cpu.json", written)


def pool_small_books(written):
    """Every small book's recipe compared with its default, then each recipe's books pooled again; the results file
    as last written (`written` when nothing was)."""
    written = compare_recipes() or written
    for suffix in recipe_suffixes():
        overall = small_books_overall(suffix)
        # Pooled again, or dropped: a pooling of earlier runs the books no longer match must not stand.
        key = f"small_books_overall{suffix}"
        written = write_results("stair-cpu.json", {key: overall}) if overall else drop_part("stair-cpu.json", key)
    return written


def full_book_baselines(books: dict, settings) -> dict:
    from strata.encoders.embedder import Embedder
    from strata.toc.baselines import LeafBM25, LeafDense, LeafHybrid
    from strata.toc.tree import document_toc

    embedder = Embedder(settings.index.embedding)
    queries, rankings = [], {}
    build = {}
    for name, (paper, book_queries) in books.items():
        toc = document_toc(paper)
        started = time.perf_counter()
        bm25 = LeafBM25(toc)
        built = time.perf_counter()
        dense = LeafDense(toc, settings.index.embedding, embedder)
        build[name] = {
            "leaves": len(toc.leaves()),
            "chunks": len(paper.chunks),
            "bm25_build_s": built - started,
            "dense_build_s": time.perf_counter() - built,
        }
        queries += book_queries
        hybrid = LeafHybrid(bm25, dense, settings.search)
        rrf = LeafHybrid(bm25, dense, settings.search.model_copy(update={"fusion": "rrf"}))  # the earlier default
        for method, retriever in (("bm25", bm25), ("dense", dense), ("hybrid", hybrid), ("hybrid-rrf", rrf)):
            rankings.setdefault(method, []).extend(retriever.rank(q.question, K) for q in book_queries)
    return {
        "kind": "baselines",
        "device": "cpu",
        "build": build,
        "methods": {method: by_scope(method, queries, ranked, "full") for method, ranked in rankings.items()},
    }


def full_books_fused(books: dict, settings, zero_settings, small_settings, sample: int, tag: str) -> dict:
    """The fused retriever on each whole book without an adapter: the zero-shot LLM (zero_settings.llm.model, in
    transformers) orders the hybrid candidates, at the weight chosen on synthetic dev questions (the book's
    small-book questions of the `small_settings` recipe, mapped to the whole book's leaves by path: the only
    synthetic questions there are; no test question is used), with the evidence rule. At weight 0 the order is the
    hybrid one and every test question is ranked; else the LLM runs on `sample` questions per book (~10 s each).
    BM25, dense and hybrid are ranked on the same questions."""
    from strata.toc.adapter import load_base_model
    from strata.toc.encode import PromptEncoder
    from strata.toc.fused import choose_fusion_weight
    from strata.train.toc_lora import dev_cut
    from strata.toc.query import fused_retriever
    from strata.toc.synthetic import split_questions
    from strata.toc.tree import document_toc

    started = time.perf_counter()
    model, tokenizer, identity = load_base_model(zero_settings.llm.model, settings.llm.model_dir, "cpu",
                                                 small_settings.toc.threads)  # fmt: skip
    encoder = PromptEncoder(tokenizer, small_settings.toc)
    load_s = time.perf_counter() - started
    queries, rankings, per_book = [], {}, {}
    for name, (paper, book_queries) in books.items():
        toc = document_toc(paper)
        small_toc = document_toc(small_test_set(books, name)[0])
        _, questions, _ = small_book_questions(small_toc, settings, small_settings)
        by_path = {tuple(leaf.path): leaf.number for leaf in toc.leaves()}
        assert len(by_path) == len(toc.leaves()), f"{name}: two leaves share a path; dev cannot be mapped by path"
        split = split_questions(questions, small_settings.toc.dev_fraction, SEED)
        dev = [item.model_copy(update={"leaf": by_path[tuple(small_toc.entry(item.leaf).path)]})
               for item in split if item.split == "dev"]  # fmt: skip
        dev = dev_cut(dev, CPU_DEV_LIMIT)  # the bare model reads a whole book's ToC: ~10 s a question
        begun = time.perf_counter()
        # adapt_toc True: the model reads the ToC as it is (a bare model has no adapter to disable for it). It
        # answers in the adapters' label format, "title (number)", unlike the llama.cpp zero-shot rows' prompt.
        retriever = fused_retriever(small_settings, toc, model, encoder, True, 0.0)
        choice = choose_fusion_weight(retriever, dev, small_settings.search.fusion_max_p)
        dev_s = time.perf_counter() - begun
        log(f"{name}: {choice.verdict()} ({dev_s:.0f}s): {choice.curve}")
        retriever.weight = choice.weight
        asked = book_queries if choice.weight == 0 else llm_sample(book_queries, sample)
        begun = time.perf_counter()
        rankings.setdefault(FUSED, []).extend(retriever.rank(q.question, K) for q in asked)
        test_s = time.perf_counter() - begun
        hybrid = retriever.hybrid
        for method, ranker in (("bm25", hybrid.bm25), ("dense", hybrid.dense), ("hybrid", hybrid)):
            rankings.setdefault(method, []).extend(ranker.rank(q.question, K) for q in asked)
        queries += asked
        per_book[name] = {"fusion": choice.model_dump(), "questions": len(asked), "of": len(book_queries),
                          "dev_seconds": dev_s, "test_seconds": test_s,
                          "toc_tokens": len(encoder.query_prefix("stair", toc))}  # fmt: skip
    methods = {method: by_scope(method, queries, ranked, tag) for method, ranked in rankings.items()}
    return {
        "kind": "full-books-fused",
        "device": "cpu",
        "model": identity,
        "model_load_seconds": load_s,
        "fusion_candidates": small_settings.toc.fusion_candidates,
        "dev_questions": "the dev split of the small-book synthetic questions of the recipe "
                         f"q{small_settings.toc.questions_per_leaf}p{small_settings.toc.passages_per_leaf}, "
                         "mapped to the whole book's leaves",
        "books": per_book,
        "methods": methods,
        "comparisons": fused_tests(methods),
    }


def zero_shot_llm(question_sets: list, settings, described: dict, tag: str, key: str) -> dict:
    """The packaged LLM zero-shot on each (toc, questions) set: trie-constrained and free; `described` says which
    questions (kind, sample, chapters). The part is written to the results (marked partial) every CHECKPOINT_EVERY
    questions, so a run cut short still leaves numbers."""
    from strata.llm import make_client
    from strata.toc.retriever import TocRetriever, toc_llm_settings

    queries, constrained, free = [], [], []
    first_query_s = {}

    def part() -> dict:
        return {
            **described,
            "device": "cpu",
            "model": settings.llm.model,
            # the first question of a book reads its whole ToC into the KV cache; the rest reuse it
            "first_question_seconds": first_query_s,
            "constrained_steps": retriever.constrained_steps,
            "methods": {
                "zero-shot-llm": by_scope("zero-shot-llm", queries, constrained, tag),
                "zero-shot-llm-unconstrained": by_scope("zero-shot-llm-unconstrained", queries, free, tag),
            },
        }

    with make_client(toc_llm_settings(settings), cache=False) as client:
        retriever = TocRetriever(client, settings.toc)
        for toc, chosen in question_sets:
            started = time.perf_counter()
            for number, query in enumerate(chosen):
                constrained.append(retriever.rank(toc, query.question, K))
                free.append(retriever.generate(toc, query.question))
                queries.append(query)
                if number == 0:
                    first_query_s[toc.paper_id] = time.perf_counter() - started  # includes reading the ToC once
                log(f"zero-shot {toc.paper_id}: {number + 1}/{len(chosen)}")
                if len(queries) % CHECKPOINT_EVERY == 0:
                    write_results("stair-cpu.json", {key: {**part(), "partial": True}})
    return part()


def small_overrides(args: argparse.Namespace) -> dict:
    """CPU_SMALL_SETTINGS with the training flags given on the command line."""
    given = {
        "toc.max_steps": args.max_steps,
        "toc.threads": args.threads,
        "toc.eval_every_steps": args.eval_every,
        "toc.patience": args.patience,
        "toc.train_model": args.train_model,
        "toc.questions_per_leaf": args.questions_per_leaf,
        "toc.passages_per_leaf": args.passages_per_leaf,
    }
    return CPU_SMALL_SETTINGS | {name: value for name, value in given.items() if value is not None}


def small_key(book: str, overrides: dict) -> str:
    """The small book's name in the results: the book, then the base model when it is not the measured default and
    the question recipe when one was given (so another recipe is reported beside the default, never over it, and
    never pooled with it)."""
    parts = [book]
    if overrides["toc.train_model"] != CPU_SMALL_SETTINGS["toc.train_model"]:
        parts.append(Path(overrides["toc.train_model"].removeprefix("packaged:")).stem)
    recipe = overrides.get("toc.questions_per_leaf"), overrides.get("toc.passages_per_leaf")
    if any(recipe):
        from strata.config import TocSettings

        defaults = TocSettings()
        parts.append(f"q{recipe[0] or defaults.questions_per_leaf}p{recipe[1] or defaults.passages_per_leaf}")
    return "-".join(parts)


def small_test_set(books: dict, name: str):
    """A small book, its chapters' questions, and the CPU_SMALL_TEST_SAMPLE of them every method is tested on."""
    paper, chapter_queries = chapter_subset(*books[name], SMALL_BOOKS[name])
    return paper, chapter_queries, llm_sample(chapter_queries, CPU_SMALL_TEST_SAMPLE)


def small_book_questions(toc, settings, small_settings):
    """The small book's (question model, synthetic questions by leaf, seconds spent writing them) at the recipe of
    `small_settings`: from the cache, the packaged LLM writing those of leaves it lacks (each leaf cached as soon as
    it is written)."""
    from strata.llm import make_client
    from strata.llm.packaged import resolve_model
    from strata.toc.synthetic import QuestionCache, cached_questions, generate_questions

    started = time.perf_counter()
    question_model = resolve_model(settings.llm.model, settings.llm.model_dir).identity
    cache = QuestionCache(small_settings.toc.question_cache, toc.paper_id, question_model)
    questions = cached_questions(toc, toc.leaves(), small_settings.toc, cache)
    if len(questions) < len(toc.leaves()):  # the LLM is loaded only when some leaf has no cached questions
        with make_client(settings) as client:
            questions = generate_questions(client, toc, toc.leaves(), small_settings.toc, cache)
    return question_model, questions, time.perf_counter() - started


class SmallBook(NamedTuple):
    """A small book's STAIR job as the CPU recipe builds it, with what its results part reports."""

    name: str
    toc: object
    all_queries: list
    queries: list
    settings: object  # the recipe's Settings
    question_model: str
    questions: dict
    question_seconds: float
    job: object  # StairJob


def small_book_setup(books: dict, name: str, settings, overrides: dict, modes: tuple, **job_fields) -> SmallBook:
    """The small book's job: its synthetic questions (cached, or written now), the recipe's settings, its test
    sample; `job_fields` override the CPU's (dev limit, inference batch, zero-shot)."""
    from strata.config import Settings
    from strata.experiments.stair import BookJob, JobQuery, StairJob
    from strata.toc.tree import document_toc

    paper, all_queries, queries = small_test_set(books, name)
    queries = queries[: job_fields.pop("test_limit", None)]  # a smoke run's few
    toc = document_toc(paper)
    small_settings = Settings.load(overrides=QUESTIONS | overrides)
    question_model, questions, question_seconds = small_book_questions(toc, settings, small_settings)
    job = StairJob(
        books=[
            BookJob(
                toc=toc,
                questions=questions,
                queries=[JobQuery(query_id=q.query_id, question=q.question) for q in queries],
            )
        ],
        settings=small_settings.toc,
        seed=SEED,
        modes=list(modes),
        # the zero-shot baseline is the packaged LLM on the ToC (zero_shot_llm); CPU time is scarce
        **({"dev_limit": CPU_DEV_LIMIT, "inference_batch": CPU_BATCH, "zero_shot": False} | job_fields),
    )
    return SmallBook(name, toc, all_queries, queries, small_settings, question_model, questions, question_seconds, job)


def small_book(
    books: dict, name: str, key: str, settings, train_budget_s: float, overrides: dict, modes: tuple, reuse: bool
) -> dict:
    from strata.experiments.stair import run_job

    setup = small_book_setup(books, name, settings, overrides, modes)
    adapters = ADAPTERS / key
    runs = run_job(setup.job, setup.settings.toc.train_model, settings.llm.model_dir, "cpu", adapters, log,
                   train_budget_s, reuse=reuse)  # fmt: skip
    return small_book_part(setup, key, settings, runs, adapters / "stair", train_budget_s)


def small_book_part(setup: SmallBook, key: str, settings, runs, stair_adapter: Path | None, train_budget_s) -> dict:
    """The small book's results part: the leaf baselines, every method `runs` ranked with, and STAIR fused with
    hybrid search on this CPU from the adapter in `stair_adapter` (trained here or brought back from a GPU; None:
    no fused row)."""
    from strata.encoders.embedder import Embedder
    from strata.toc.baselines import LeafBM25, LeafDense, LeafHybrid

    toc, queries, tag = setup.toc, setup.queries, f"small-{key}"
    embedder = Embedder(settings.index.embedding)
    methods = {
        "bm25": by_scope("bm25", queries, [LeafBM25(toc).rank(q.question, K) for q in queries], tag),
    }
    dense = LeafDense(toc, settings.index.embedding, embedder)
    methods["dense"] = by_scope("dense", queries, [dense.rank(q.question, K) for q in queries], tag)
    hybrid = LeafHybrid(LeafBM25(toc), dense, settings.search)
    methods["hybrid"] = by_scope("hybrid", queries, [hybrid.rank(q.question, K) for q in queries], tag)
    for run in runs.runs:
        methods[run.method] = by_scope(run.method, queries, [run.rankings[q.query_id] for q in queries], tag)
    fusion, agreement = None, None
    trained_stair = next((run for run in runs.runs if run.method == "stair"), None)
    if trained_stair and stair_adapter is not None and (stair_adapter / "adapter_config.json").is_file():
        elsewhere = runs.device != "cpu"
        fused, fusion, mine = fused_stair(setup.settings, toc, stair_adapter, queries, runs.splits[toc.paper_id],
                                          alone=elsewhere)  # fmt: skip
        methods[FUSED] = by_scope(FUSED, queries, fused, tag)
        if mine is not None:  # the adapter brought back, ranking alone here: does the CPU answer as the GPU did?
            methods[STAIR_HERE] = by_scope(STAIR_HERE, queries, mine, tag)
            sent = [trained_stair.rankings[q.query_id] for q in queries]
            same = sum(a.leaves[:1] and b.leaves[:1] and a.leaves[0].number == b.leaves[0].number
                       for a, b in zip(mine, sent))  # fmt: skip
            agreement = {"questions": len(queries), "same_top_leaf": int(same)}
    return {
        "kind": "small-book",
        "device": runs.device,
        "book": setup.name,
        "chapters": list(SMALL_BOOKS[setup.name]),
        "leaves": len(toc.leaves()),
        "questions_test": len(queries),
        "sample": {"questions": len(queries), "of": len(setup.all_queries), "seed": SEED},  # BM25, dense on them too
        "synthetic_questions": {
            "model": setup.question_model,
            "leaves": len(setup.questions),
            "questions": sum(len(q) for q in setup.questions.values()),
            "seconds_this_run": setup.question_seconds,  # ~0 when the on-disk cache was already filled
        },
        "train_model": setup.settings.toc.train_model,
        "settings": setup.settings.toc.model_dump(mode="json"),
        "train_budget_s_per_adapter": train_budget_s,
        "model_load_seconds": runs.model_load_seconds,
        "training": [report.model_dump() for report in runs.train],
        "reused_adapters": runs.reused,  # trained by an earlier run of this part (`training` is that run's report)
        "fusion": fusion.model_dump() if fusion else None,
        "fused_on": "cpu" if fusion else None,  # the fused retriever always ranks here, with the adapter on the CPU
        "cpu_agreement": agreement,  # an adapter trained elsewhere: its top leaf here and there, per test question
        "methods": methods,
        "comparisons": paired_tests(methods, "stair") + fused_tests(methods),
    }


def fused_stair(settings, toc, adapter, queries, split, alone: bool = False) -> tuple[list, object, list | None]:
    """The STAIR adapter fused with hybrid search (strata.toc.fused): the weight chosen on the dev questions of the
    adapter's split, then every test question ranked; with `alone`, also the adapter's own rankings on this CPU
    (an adapter trained elsewhere, checked against the rankings it sent)."""
    from strata.toc.adapter import load_adapter, load_base_model, read_adapter_meta
    from strata.toc.decode import rank_questions
    from strata.toc.encode import PromptEncoder
    from strata.toc.fused import choose_fusion_weight
    from strata.toc.query import fused_retriever

    model, tokenizer, identity = load_base_model(
        settings.toc.train_model, settings.llm.model_dir, "cpu", settings.toc.threads
    )
    tuned = load_adapter(model, adapter, identity, "stair")
    encoder = PromptEncoder(tokenizer, settings.toc)
    retriever = fused_retriever(settings, toc, tuned, encoder, read_adapter_meta(adapter).adapt_toc, 0.0)
    started = time.perf_counter()
    # Every dev question, as `strata train-toc` chooses its weight (once, ~3 s each): on the 39-45 a training check
    # reads, a 10-point dev gain was too little evidence to leave the hybrid order (psychology-2e, p 0.22).
    dev = [item for item in split if item.split == "dev"]
    choice = choose_fusion_weight(retriever, dev, settings.search.fusion_max_p)
    log(f"{choice.verdict()} ({time.perf_counter() - started:.0f}s): {choice.curve}")
    retriever.weight = choice.weight
    fused = [retriever.rank(q.question, K) for q in queries]
    if not alone:
        return fused, choice, None
    base_read = not read_adapter_meta(adapter).adapt_toc
    mine = rank_questions("stair", tuned, encoder, toc, [q.question for q in queries], settings.toc, "stair", False,
                          base_prefix=base_read)  # fmt: skip
    return fused, choice, mine


def fused_tests(methods: dict, metric: str = "R@1") -> list[dict]:
    """The fused retriever against each of its parts' baselines (BM25, dense, hybrid) and STAIR alone."""
    if FUSED not in methods:
        return []
    return [
        {"system": FUSED, "baseline": baseline, **paired(methods, FUSED, baseline, metric)}
        for baseline in ("bm25", "dense", "hybrid", "stair")
        if baseline in methods and "all" in methods[baseline]
    ]


def recipe_suffixes() -> list[str]:
    """'' (the default recipe) and the suffix of every other one (base model, questions: see small_key) that some
    small book was trained on, so each recipe is pooled over the books on their own."""
    from strata.eval.results import load_result

    path = RESULTS / "stair-cpu.json"
    described = load_result(path).details.get("parts", {}) if path.is_file() else {}
    found = {key.removeprefix(f"small_{part['book']}") for key, part in described.items()
             if part.get("kind") == "small-book"}  # fmt: skip
    return sorted(found | {""})


def small_books_overall(suffix: str = "") -> dict | None:
    """Every method of the small-book parts of one recipe (`suffix`: '' for the default) over their questions
    together (from the per-query files those parts wrote, so each book can be trained by a separate run), with the
    paired tests on the pooled questions."""
    from strata.eval.results import load_result, pooled_command
    from strata.eval.toc import method_result, summarise

    path = RESULTS / "stair-cpu.json"
    written = load_result(path) if path.is_file() else None
    described = written.details.get("parts", {}) if written else {}
    parts = {name: described[f"small_{name}{suffix}"] for name in SMALL_BOOKS if f"small_{name}{suffix}" in described}
    if len(parts) < 2:
        log(f"not pooling the small books{suffix}: {path.name} holds {len(parts)} of them "
            f"({', '.join(parts) or 'none'})")
        return None
    # Where the synthetic questions were read from is no part of the recipe (the files are named by book and model);
    # nor is a setting added after one of the runs (that run could not set it: it ran as the default was then).
    recorded = [part.get("settings", {}) for part in parts.values()]
    shared_keys = set.intersection(*(set(settings) for settings in recorded)) - {"question_cache"}
    recipes = {json.dumps({k: settings[k] for k in shared_keys}, sort_keys=True) for settings in recorded}
    if len(recipes) > 1:  # e.g. one book measured again with a new recipe, the other not yet
        log(f"not pooling the small books{suffix}: they were trained with different settings")
        return None
    cells = {name: methods_of(written, f"small_{name}{suffix}") for name in parts}
    shared = [m for m in next(iter(cells.values())) if all(m in part for part in cells.values())]
    methods = {}
    earlier = methods_of(written, f"small_books_overall{suffix}")
    for method in shared:
        files = [REPO / part[method]["all"]["per_query_file"] for part in cells.values()]
        per_query = [row for file in files for row in method_result(load_result(file).experiments[0]).per_query]
        summary = summarise(method, "all", per_query)
        # Pooling measures nothing: the pooled row is the books' runs' (each book's rows are copied as measured)
        command = pooled_command(part[method]["all"]["command"] for part in cells.values())
        now = {"queries": summary.queries, "metrics": summary.metrics, "command": command}
        before = earlier.get(method, {}).get("all")
        if before is not None and all(before[key] == value for key, value in now.items()):
            pooled = before  # pooled as before: its per-query file stays as written then
        else:
            pooled = cell(*record(summary, f"small-books{suffix}", command))
        methods[method] = {"all": pooled, **{name: cells[name][method][name] for name in parts}}
    pooled_from = [f"small_{name}{suffix}" for name in parts]
    zero_shot = methods_of(written, "zero_shot_llm_small_book")
    if zero_shot and all(  # it asked every test question of every small book (--llm-sample >= 60)
        entry.get(name, {}).get("queries") == part["questions_test"]
        for entry in zero_shot.values()
        for name, part in parts.items()
    ):
        methods.update(zero_shot)
        pooled_from.append("zero_shot_llm_small_book")
    return {
        "kind": "small-books",
        "device": "cpu",
        "recipe": suffix,  # '' for the default; else the suffix of the pooled parts' keys (base model, questions)
        "pooled_from": pooled_from,
        "methods": methods,
        "comparisons": paired_tests(methods, "stair") + fused_tests(methods),
    }


# --- gpu


def prepare_gpu(args: argparse.Namespace) -> None:
    """Everything a lent GPU needs, in `args.folder`: the plan and its jobs, the model in parts, the wheels."""
    from strata.config import Settings
    from strata.llm.packaged import resolve_model

    folder = Path(args.folder)
    (folder / "jobs").mkdir(parents=True, exist_ok=True)
    for old in (folder / "jobs").glob("*.json"):
        old.unlink()
    settings = Settings.load(overrides=QUESTIONS)
    books = {name: load_book(name) for name in BOOKS}
    planned = small_gpu_jobs(books, settings, args) if args.scope == "small" else [full_gpu_job(books, args)]
    jobs = []
    for name, job, entry in planned:
        (folder / "jobs" / f"{name}.json").write_text(job.model_dump_json())
        jobs.append({"name": name, **entry})
        log(f"job {name}: {', '.join(job.modes)}; {len(job.books[0].queries)} test questions")
    (folder / "plan.json").write_text(json.dumps({"scope": args.scope, "jobs": jobs}, indent=2))
    models = {job.settings.train_model for _, job, _ in planned}  # the plan trains one base model
    (model,) = models
    split_file(resolve_model(model, settings.llm.model_dir).path, folder)
    download_wheels(folder / "wheels")
    sizes = {p.name: p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}
    log(f"prepared {folder}: " + ", ".join(f"{n} {s / 2**20:.1f} MiB" for n, s in sizes.items()))


# The CPU's small-book recipe (CPU_SMALL_SETTINGS on 24 questions asked per leaf over 8 passages, whose questions are
# committed), so the GPU's adapters differ from the CPU's only in device, dev questions and no wall-clock cut.
GPU_SMALL_RECIPE = {"toc.questions_per_leaf": 24, "toc.passages_per_leaf": 8}
GPU_SMALL_JOB = {"dev_limit": 300, "inference_batch": 32}
# prepare-gpu --smoke: the same plan cut to seconds, for a dry run of the whole path on this CPU
SMOKE_OVERRIDES = {"toc.max_steps": 2, "toc.eval_every_steps": 2}
SMOKE_JOB = {"dev_limit": 3, "test_limit": 3}


def small_gpu_overrides(args: argparse.Namespace) -> dict:
    return CPU_SMALL_SETTINGS | GPU_SMALL_RECIPE | ({"toc.train_model": args.model} if args.model else {})


def small_gpu_jobs(books: dict, settings, args: argparse.Namespace) -> list:
    """(name, job, plan entry) per run: each small book's STAIR and DSI adapters on the CPU's recipe (with the base
    model zero-shot on the same prompt; the STAIR adapter comes back for the fused retriever here), then, if time
    is left, STAIR trained on the ToC tokens too (toc.adapt_toc, the paper's setting, too slow on this CPU)."""
    overrides = small_gpu_overrides(args) | (SMOKE_OVERRIDES if args.smoke else {})
    job_fields = GPU_SMALL_JOB | (SMOKE_JOB if args.smoke else {})
    variants = (
        ("", overrides, ("stair", "dsi"), {"zero_shot": True}, True),
        ("-adapttoc", overrides | {"toc.adapt_toc": True}, ("stair",), {"zero_shot": False}, False),
    )
    planned = []
    for suffix, chosen, modes, fields, adapter in variants:
        for book in SMALL_BOOKS:
            setup = small_book_setup(books, book, settings, chosen, modes, **(job_fields | fields))
            key = f"{small_key(book, chosen)}{suffix}-gpu{'-smoke' if args.smoke else ''}"
            entry = {"book": book, "key": key, "overrides": chosen, "modes": list(modes),
                     "job_fields": job_fields | fields, "adapter": adapter}  # fmt: skip
            planned.append((key, setup.job, entry))
    return planned


def full_gpu_job(books: dict, args: argparse.Namespace) -> tuple:
    """Both whole books in one job: questions generated there (unless cached ones are shipped), STAIR and DSI."""
    from strata.config import Settings
    from strata.experiments.stair import BookJob, JobQuery, StairJob
    from strata.toc.synthetic import QuestionCache, cached_questions
    from strata.toc.tree import document_toc

    settings = Settings.load(overrides=GPU_SETTINGS | QUESTIONS)
    jobs = []
    for name, (paper, queries) in books.items():
        toc = document_toc(paper)
        cache = QuestionCache(settings.toc.question_cache, toc.paper_id, args.question_model)
        questions = cached_questions(toc, toc.leaves(), settings.toc, cache) if args.question_model else {}
        log(f"{name}: {len(toc.leaves())} leaves, {len(questions)} with cached questions, {len(queries)} questions")
        jobs.append(BookJob(toc=toc, questions=questions,
                            queries=[JobQuery(query_id=q.query_id, question=q.question) for q in queries]))  # fmt: skip
    job = StairJob(books=jobs, settings=settings.toc, seed=SEED, dev_limit=150, inference_batch=32)
    return "full-books-gpu", job, {"adapter": False}


def download_wheels(wheels: Path, packages: tuple[str, ...] = GPU_WHEELS) -> None:
    wheels.mkdir(exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version",
         "3.12", "--implementation", "cp", "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
         "--platform", "manylinux_2_31_x86_64",
         "-d", str(wheels), *packages],
        check=True,
    )  # fmt: skip


def split_file(path: Path, folder: Path, name: str = "model.gguf") -> None:
    """`path` as `name`.part-NN files under the device's 64 MiB per-call transfer limit, with its sha256 in
    `name`'s stem + .sha256 (model.sha256)."""
    for old in folder.glob(f"{name}.part-*"):
        old.unlink()
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for index, block in enumerate(iter(lambda: handle.read(PART_BYTES), b"")):
            digest.update(block)
            (folder / f"{name}.part-{index:02d}").write_bytes(block)
    (folder / f"{name.split('.')[0]}.sha256").write_text(digest.hexdigest() + "\n")


def run_gpu(args: argparse.Namespace) -> None:
    """Every job of the plan in order on one loaded model, none but the first started after `--deadline-s`; the
    runs so far are in OUT/runs.json after every stage, and each returned STAIR adapter in OUT as parts as soon as it
    is trained."""
    from strata.experiments.stair import StairJob, StairRuns, load_base, run_job
    from strata.toc.adapter import resolve_device

    started = time.perf_counter()
    plan = json.loads(Path(args.plan).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device("auto")
    base = load_base(args.model, Path("/tmp"), device)
    log(f"loaded {base.identity} on {device} in {base.seconds:.0f}s")
    done: dict[str, StairRuns] = {}
    packed: set[str] = set()

    def checkpoint(entry: dict, runs: StairRuns) -> None:  # partial results survive a run cut off at the time limit
        name = entry["name"]
        done[name] = runs
        (out / "runs.json").write_text(json.dumps({key: value.model_dump(mode="json") for key, value in done.items()}))
        log(f"{time.perf_counter() - started:.0f}s: wrote {out / 'runs.json'} ({name}: {len(runs.runs)} methods)")
        folder = Path(args.adapters) / name / "stair"
        ranked = any(run.method == "stair" for run in runs.runs)
        if entry.get("adapter") and ranked and name not in packed and (folder / "adapter_config.json").is_file():
            parts = pack_adapter(folder, out, f"{name}.stair")  # at once: a later stage may be cut off
            packed.add(name)
            log(f"{name}: STAIR adapter in {len(parts)} parts ({sum(p.stat().st_size for p in parts) / 2**20:.1f} MiB)")

    for index, entry in enumerate(plan["jobs"]):
        name = entry["name"]
        if index > 0 and time.perf_counter() - started > args.deadline_s:
            log(f"{name}: not started, past the {args.deadline_s:.0f}s deadline")
            continue
        job = StairJob.model_validate_json((Path(args.plan).parent / "jobs" / f"{name}.json").read_text())
        runs = run_job(job, args.model, Path("/tmp"), device, Path(args.adapters) / name, log, args.budget_s,
                       partial(checkpoint, entry), base=base)  # fmt: skip
        if runs.errors:
            log(f"{name}: failed stages: " + "; ".join(runs.errors))


def pack_adapter(folder: Path, out: Path, stem: str) -> list[Path]:
    """The adapter folder as a tar in parts under the device's 16 MiB per returned file, its LoRA weights in
    bfloat16 (half the bytes; the adapter trained under bfloat16 autocast, and loads onto a float32 base)."""
    import io
    import tarfile

    import torch
    from safetensors.torch import load_file, save

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(folder.iterdir()):
            data = path.read_bytes()
            if path.suffix == ".safetensors":
                halved = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(str(path)).items()}
                data = save(halved, metadata={"format": "pt"})
            info = tarfile.TarInfo(path.name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    parts = []
    for index in range(0, len(data), RETURN_BYTES):
        part = out / f"{stem}.tar.part-{index // RETURN_BYTES:02d}"
        part.write_bytes(data[index : index + RETURN_BYTES])
        parts.append(part)
    return parts


def unpack_adapter(runs_dir: Path, stem: str, folder: Path) -> bool:
    """The adapter `pack_adapter` sent back, extracted into `folder` (replaced); False when no part came back."""
    import io
    import shutil
    import tarfile

    parts = sorted(runs_dir.glob(f"{stem}.tar.part-*"))
    if not parts:
        return False
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts)), mode="r") as tar:
        tar.extractall(folder, filter="data")
    return True


def collect(args: argparse.Namespace) -> None:
    """Score what the GPU sent back: the small books' runs (with the fused retriever ranked here from the adapter
    it sent), or the whole books'."""
    from strata.experiments.stair import StairRuns

    plan = json.loads(Path(args.plan).read_text())
    found = json.loads((Path(args.runs) / "runs.json").read_text())
    runs = {name: StairRuns.model_validate(value) for name, value in found.items()}
    if plan["scope"] == "small":
        collect_small(plan, Path(args.plan).parent, runs, Path(args.runs))
    else:
        collect_full(runs["full-books-gpu"])


def collect_small(plan: dict, plan_dir: Path, runs: dict, runs_dir: Path) -> None:
    from strata.config import Settings
    from strata.experiments.stair import StairJob

    settings = Settings.load(overrides=QUESTIONS)
    books = {name: load_book(name) for name in BOOKS}
    written = None
    for entry in plan["jobs"]:
        name = entry["name"]
        if name not in runs:
            log(f"{name}: no runs came back (not started before the deadline)")
            continue
        setup = small_book_setup(books, entry["book"], settings, entry["overrides"], tuple(entry["modes"]),
                                 **entry["job_fields"])  # fmt: skip
        # Compared as models: a setting added since then reads back at its default
        if setup.job != StairJob.model_validate_json((plan_dir / "jobs" / f"{name}.json").read_text()):
            raise SystemExit(f"{name}: the job rebuilt here is not the one the GPU ran (questions or settings changed "
                             "since prepare-gpu); prepare and run it again")
        adapter = ADAPTERS / entry["key"] / "stair"
        unpacked = entry.get("adapter") and unpack_adapter(runs_dir, f"{name}.stair", adapter)
        part = small_book_part(setup, entry["key"], settings, runs[name], adapter if unpacked else None, None)
        written = write_results("stair-cpu.json", {f"small_{entry['key']}": part})
    print_tables("stair-cpu.json", pool_small_books(written))


def collect_full(runs) -> None:
    queries = [query for name in BOOKS for query in load_book(name)[1]]
    methods = {}
    for run in runs.runs:
        answered = [query for query in queries if query.query_id in run.rankings]  # all, unless the job was cut
        methods[run.method] = by_scope(run.method, answered, [run.rankings[q.query_id] for q in answered], "gpu")
    results = {
        "kind": "gpu",
        "model": runs.model,
        "device": runs.device,
        "model_load_seconds": runs.model_load_seconds,
        "question_generation_seconds": runs.question_seconds,
        "generated_questions": {
            paper: sum(len(q) for q in leaves.values()) for paper, leaves in runs.generated_questions.items()
        },
        "training": [report.model_dump() for report in runs.train],
        "methods": methods,
        "comparisons": paired_tests(methods, "stair"),
        "errors": runs.errors,
    }
    print_tables("stair-gpu.json", write_results("stair-gpu.json", {"full_books_gpu": results}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    cpu = commands.add_parser("cpu")
    cpu.add_argument(
        "--parts",
        default="full,zero-shot,zero-shot-small,small",
        help=f"comma-separated, of {', '.join(CPU_PARTS)} (zero-shot-small: the LLM on the small books; overall: "
        "pool the small books' results again, which 'small' also does; questions: only write the small books' "
        "synthetic questions into their cache, for a later 'small' run to train on)",
    )
    cpu.add_argument(
        "--small-books", default=",".join(SMALL_BOOKS), help="books whose small book the small parts run, in order"
    )
    cpu.add_argument("--llm-sample", type=int, default=100, help="questions per book for the zero-shot LLM")
    cpu.add_argument("--zero-shot-model", help="llm.model of the zero-shot parts (e.g. packaged:qwen2.5-coder-1.5b), "
                     "reported under its own key; the synthetic questions stay the default model's")
    cpu.add_argument("--train-budget-s", type=float, default=CPU_TRAIN_BUDGET_S, help="wall seconds per adapter")
    cpu.add_argument("--modes", default="stair,dsi", help="adapters the small part trains (stair, dsi)")
    cpu.add_argument("--reuse-adapters", action="store_true", help="rank with an adapter an earlier run of the same "
                     "part trained on the same settings, seed and questions, instead of training it again")
    cpu.add_argument("--max-steps", type=int, help="toc.max_steps (default: toc.max_epochs epochs)")
    cpu.add_argument("--threads", type=int, help="toc.threads: torch threads (2 on a quiet machine)")
    cpu.add_argument("--eval-every", type=int, help="toc.eval_every_steps: steps between dev R@1 checks")
    cpu.add_argument("--patience", type=int, help=f"toc.patience (default {CPU_SMALL_SETTINGS['toc.patience']})")
    cpu.add_argument(
        "--train-model",
        help=f"toc.train_model: the base fine-tuned (default {CPU_SMALL_SETTINGS['toc.train_model']}); another base "
        "is reported as its own small-book part, e.g. small_psychology-2e-smollm2-135m",
    )
    cpu.add_argument("--questions-per-leaf", type=int, help="toc.questions_per_leaf (a part of its own, e.g. "
                     "small_psychology-2e-q24p8)")
    cpu.add_argument("--passages-per-leaf", type=int, help="toc.passages_per_leaf (with --questions-per-leaf)")
    prepare = commands.add_parser("prepare-gpu")
    prepare.add_argument("--folder", default=str(GPU_FOLDER))
    prepare.add_argument("--scope", choices=("small", "full"), default="small",
                         help="small: each small book on the CPU's 24-over-8 recipe (cached questions); full: both "
                         "whole books, questions generated there")  # fmt: skip
    prepare.add_argument("--model", default=None, help="model to fine-tune there (default: toc.train_model)")
    prepare.add_argument("--smoke", action="store_true", help="small: 2 steps, 3 dev and 3 test questions a job "
                         "(a dry run of the path; results under their own '-smoke' keys)")
    prepare.add_argument(
        "--question-model", default="", help="full: identity of a model whose cached questions to ship (default: none)"
    )
    gpu = commands.add_parser("gpu")
    gpu.add_argument("--plan", required=True, help="the plan.json prepare-gpu wrote (its jobs/ beside it)")
    gpu.add_argument("--model", required=True, help="path of the GGUF model")
    gpu.add_argument("--out", required=True)
    gpu.add_argument("--adapters", default="/tmp/stair_adapters", help="where each job's adapters are saved")
    gpu.add_argument("--budget-s", type=float, default=90.0, help="training seconds per adapter")
    gpu.add_argument("--deadline-s", type=float, default=400.0,
                     help="no job but the first starts after this many seconds")
    collected = commands.add_parser("collect")
    collected.add_argument("--plan", default=str(GPU_FOLDER / "plan.json"))
    collected.add_argument("--runs", required=True, help="the folder the GPU's runs.json (and adapter parts) are in")
    args = parser.parse_args()
    {"cpu": run_cpu, "prepare-gpu": prepare_gpu, "gpu": run_gpu, "collect": collect}[args.command](args)


if __name__ == "__main__":
    main()
