"""Read benchmark: `ask` (Retrieve -> Relate -> Read) with the embedded model on LitQA2 and SciFact dev claims.

    nice -n 10 python benchmarks/read.py [--litqa2-limit N] [--scifact-limit N] [--max-papers N] [--preset NAME]
        [--choice letter|calibrated|likelihood|grounding] [--grounding-weight W] [--accept-all]

LitQA2: the multiple-choice questions over their 39 PDFs (store built by `strata ingest` at .strata/litqa2):
accuracy, precision (correct / answered), coverage, the gold paper among the cited papers, evidence overlap with the
key passage. SciFact: dev claims that have rationales (capped), asked as text questions over the BEIR corpus store:
precision / recall / F1 of the quoted evidence sentences against the rationale sentences. Both stores are only read;
Relate's paper-vector cache goes to benchmarks/results/tmp/. Writes benchmarks/results/read.json and prints a table.

`--choice grounding` picks the option by lexical grounding alone (no LLM in the choice): the baseline the LLM must
beat. `--accept-all` also takes the LLM out of local reading (every paper read is accepted with all its passages),
so a row measures the evidence-grounding rule with no LLM at all. Choose weights on LitQA2 dev only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from strata.config import ReadSettings, Settings
from strata.documents.model import Candidate, ChunkHit
from strata.llm import Trace
from strata.pipeline import ask as pipeline_module
from strata.read.model import PaperReading
from strata.read.synthesize import decide, grounding_decides
from strata.eval.qa import QAEvalResult, QAPrediction, qa_dataset, qa_experiment, run_qa_eval
from strata.eval.results import DatasetRef, Experiment, ResultFile, merged, new_result, repo_relative, update_result

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
DATA = REPO.parent / "shared" / "data"
RESULTS = ROOT / "results"
WORK = RESULTS / "tmp" / "read"
LITQA2_STORE = REPO / ".strata" / "litqa2"
SCIFACT_STORE = REPO / ".strata" / "eval" / "scifact-ccca1f829cea-6046c948"


# SciFact's 5,183 abstracts would all be embedded once for Relate's paper-vector signal (minutes on shared cores);
# its claims are single-paper, so Relate runs on its BM25 signal alone there. The LitQA2 store's dense index was
# still being built when the first runs were made, so its first stage is BM25 alone (hybrid falls back to it); BM25
# already puts the gold paper among those read for all 23 questions, and keeping it keeps runs comparable.
RUN_OVERRIDES = {"scifact": {"relate.embedding": False}, "litqa2": {"index.dense": False}}


class AcceptEveryPaper:
    """Local reading without the LLM (`--accept-all`): every paper read is accepted, all its passages shown to the
    grounding and its first passage supporting."""

    def __init__(self, client: object, settings: ReadSettings) -> None:
        self.settings = settings

    def read(
        self,
        question: str,
        candidate: Candidate,
        passages: list[ChunkHit],
        trace: Trace,
        choose: bool = True,
        trusted: bool = False,
    ) -> PaperReading:
        return PaperReading(paper_id=candidate.paper_id, title=candidate.title, rank=candidate.rank, relevant=1.0,
                            sufficient=1.0, accepted=bool(passages), passages=passages[:1], shown=passages)


def run_name(name: str, args: argparse.Namespace) -> str:
    """The experiment's name: dataset, option choice, and the grounding weight or 'no LLM' where they apply."""
    parts = [args.choice, *(["default pipeline"] if args.default_pipeline else []),
             *([f"{args.preset} preset"] if args.preset else [])]
    if args.choice != "grounding" and args.grounding_weight is not None:
        parts.append(f"grounding {args.grounding_weight:g}")
    if args.accept_all:
        parts.append("no LLM reading")
    parts.extend(f"{key}={value}" for key, value in args.set)
    return f"{name} ({', '.join(parts)})"


def setting(text: str) -> tuple[str, object]:
    """'relate.enabled=false' -> ('relate.enabled', False): the value read as JSON, else kept as a string."""
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def settings_for(name: str, args: argparse.Namespace) -> Settings:
    weights = {} if args.grounding_weight is None else {"read.grounding_weight": args.grounding_weight}
    # The cheap benchmark setup (fewer papers and passages, no LLM retrieval), unless the default pipeline is asked.
    cheap = {} if args.default_pipeline else {
        **RUN_OVERRIDES[name],
        "read.max_papers": args.max_papers,
        "read.passages_per_paper": args.passages,
        "read.max_evidence": args.max_evidence,
        "read.llm_retrieval": args.llm_retrieval,
    }
    return Settings.load(
        preset=args.preset,
        overrides={
            **cheap,
            **weights,
            **dict(args.set),
            "read.choice": args.choice,
            "relate.paper_vector_cache": str(WORK / f"relate-{name}"),
        }
    )


def show(prediction: QAPrediction) -> None:
    verdict = "" if prediction.correct is None else ("right" if prediction.choice == prediction.correct else "wrong")
    print(
        f"  {prediction.query_id[:12]:<12} {verdict or '-':<5} answered={prediction.choice is not None} "
        f"accepted={len(prediction.accepted_papers)}/{len(prediction.read_papers)} cited={prediction.cited_papers} "
        f"gold={prediction.gold_papers} {prediction.seconds:.0f}s",
        file=sys.stderr,
        flush=True,
    )


SWEEP = [index / 10 for index in range(11)]


def weight_sweep(predictions: list[QAPrediction], read: ReadSettings) -> dict[str, float]:
    """Choice accuracy at each read.grounding_weight, recomputed from the shares each answer recorded (no new LLM
    call), so the weight is chosen on these dev questions; {} when no LLM took part in the choice. A question whose
    answer recorded no shares (nothing read, nothing to choose from) counts as wrong at every weight. A question the
    grounding decided without the model (`grounding_decides`) is known only at weights where it still would: the
    sweep leaves out the weights where some question's answer is unknown."""
    if not any(score.model is not None for prediction in predictions for score in prediction.option_scores):
        return {}
    accuracy = {}
    for weight in SWEEP:
        settings = read.model_copy(update={"grounding_weight": weight})
        right = 0
        for prediction in predictions:
            scores = prediction.option_scores
            if not scores:
                continue
            lexical = [score.grounding for score in scores]
            model = None if any(score.model is None for score in scores) else [score.model or 0.0 for score in scores]
            if model is None and not grounding_decides(lexical, weight):
                break
            best = decide(prediction.options, lexical, model, settings)
            right += best is not None and prediction.options[best] == prediction.correct
        else:
            accuracy[f"{weight:g}"] = right / len(predictions)
    return accuracy


def experiment(
    result: QAEvalResult, predictions: list[QAPrediction], args: argparse.Namespace, name: str
) -> Experiment:
    """The run as an experiment named after its dataset and option choice, with the caps it ran under and, when the
    LLM took part in the choice, the accuracy at each grounding weight."""
    run = qa_experiment(result, run_name(name, args))
    read = result.settings["read"]  # the values the run had, whether flags, the preset or defaults set them
    caps = {
        **{key: read[key] for key in ("grounding_weight", "max_papers", "enough_papers", "passages_per_paper",
                                      "max_evidence", "llm_retrieval", "choice")},
        "accept_all": args.accept_all,
        "preset": args.preset,
        "limit": result.limit,
        "overrides": {**({} if args.default_pipeline else RUN_OVERRIDES[name]), **dict(args.set)},
    }
    sweep = weight_sweep(predictions, ReadSettings.model_validate(read))
    details = {"caps": caps, "models": run.details["models"], **({"grounding_weight_sweep": sweep} if sweep else {})}
    return run.model_copy(update={"details": details})


def table(result: ResultFile) -> str:
    lines = [f"{'dataset':<10} {'n':>3}  metrics", "-" * 100]
    for run in result.experiments:
        metrics = "  ".join(f"{key} {value:.3f}" for key, value in run.metrics.items())
        lines.append(f"{run.name:<10} {run.queries:>3}  {metrics}")
        lines.append(
            f"{'':<14} {run.cost['llm_calls']:.0f} LLM calls, {run.cost['llm_tokens_in']:.0f} tokens in, "
            f"{run.cost['llm_tokens_out']:.0f} out, {run.cost['seconds_per_question']:.0f} s/question"
        )
        if sweep := run.details.get("grounding_weight_sweep"):
            lines.append(f"{'':<14} accuracy by grounding weight: "
                         + "  ".join(f"{weight} {value:.3f}" for weight, value in sweep.items()))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--litqa2-limit", type=int, default=23, help="LitQA2 questions (all 23 by default)")
    parser.add_argument("--scifact-limit", type=int, default=10, help="SciFact dev claims with rationales")
    parser.add_argument("--default-pipeline", action="store_true",
                        help="every setting at its default (dense on, LLM retrieval on, 8 papers read), instead of "
                             "the cheap setup the --max-papers/--passages/--max-evidence/--llm-retrieval flags set")
    parser.add_argument("--preset", help="a settings preset under the run's settings (e.g. quality: the 1.5B model "
                        "decides); part of the run's name")
    parser.add_argument("--litqa2-store", type=Path, default=LITQA2_STORE, help="store holding the 39 LitQA2 PDFs")
    parser.add_argument("--max-papers", type=int, default=3, help="papers read per question")
    parser.add_argument("--max-evidence", type=int, default=4, help="evidence passages given to synthesis")
    parser.add_argument("--passages", type=int, default=2, help="passages shown per paper")
    parser.add_argument("--llm-retrieval", action=argparse.BooleanOptionalAction, default=False,
                        help="let Retrieve decompose and verify with the LLM (slow on 2 shared cores)")
    parser.add_argument("--choice", choices=("letter", "calibrated", "likelihood", "grounding"), default="letter",
                        help="read.choice: how the multiple-choice option is picked (results are kept per method)")
    parser.add_argument("--grounding-weight", type=float, default=None,
                        help="read.grounding_weight: the lexical grounding's weight against the model (default: the "
                        "setting's)")
    parser.add_argument("--accept-all", action="store_true",
                        help="no LLM in local reading either: every paper read is accepted with all its passages")
    parser.add_argument("--set", type=setting, action="append", default=[], metavar="KEY=JSON",
                        help="any other setting, e.g. --set relate.enabled=false (repeatable; part of the run's name)")
    args = parser.parse_args()
    if args.accept_all:  # the pipeline builds its local reader from this name
        pipeline_module.LocalReader = AcceptEveryPaper  # type: ignore[misc,assignment]
    WORK.mkdir(parents=True, exist_ok=True)
    runs: list[Experiment] = []
    datasets: list[DatasetRef] = []
    sets = [
        ("scifact", DATA / "scifact" / "original", "dev", args.scifact_limit, SCIFACT_STORE),
        ("litqa2", DATA / "litqa2", None, args.litqa2_limit, args.litqa2_store),
    ]
    for name, folder, split, limit, store in sets:
        if limit <= 0:
            continue
        print(f"{name}: {limit} questions", file=sys.stderr, flush=True)
        predictions: list[QAPrediction] = []

        def keep(prediction: QAPrediction) -> None:
            predictions.append(prediction)
            show(prediction)

        result = run_qa_eval(
            settings_for(name, args), folder, split=split, limit=limit, output_dir=WORK, store_home=store,
            on_prediction=keep,
        )
        runs.append(experiment(result, predictions, args, name))
        datasets.append(qa_dataset(result).model_copy(update={"path": repo_relative(folder, REPO)}))
    # Datasets run separately (one per invocation on a busy machine) keep each other's experiments.
    this_run = new_result("benchmarks/read.py", runs, datasets=datasets)
    output = update_result(RESULTS / "read.json", lambda earlier: merged(earlier, this_run))
    print(table(output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
