"""``orchestrator training``: training-job recovery. ``simulate`` answers "what ETTR, which interval".

Numeric options are parsed here rather than by Typer so that a bad number is one
line naming the option, like every other error, instead of a usage panel.
"""

from __future__ import annotations

import math
import time

import typer
from rich.table import Table

from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.exceptions import OrchestratorError
from orchestrator.policy.training.ettr import (
    LINEAR_MODEL_LIMIT,
    FailureModel,
    advise_interval,
    exponential_ettr,
)
from orchestrator.policy.training.ettr_sim import (
    SimulationParams,
    best_interval_by_simulation,
    simulate,
)

__all__ = ["app", "parse_number"]

app = typer.Typer(
    name="training",
    help="Training-job checkpoint/restart recovery.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def training() -> None:
    """Training-job checkpoint/restart recovery: simulate ETTR and checkpoint intervals."""


#: Bounds that keep one invocation to a few seconds on a laptop.
MAX_RUNS = 1000
MAX_DAYS = 3650.0


def parse_number(
    option: str,
    text: str,
    *,
    integer: bool = False,
    minimum: float = 0.0,
    inclusive: bool = False,
    maximum: float = math.inf,
) -> float:
    """``text`` as a number for ``option``, or exit with one line naming the option."""
    try:
        value = float(int(text)) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        fail(f"{option} must be {kind}, got {text!r}", code=2)
    if not math.isfinite(value):
        fail(f"{option} must be finite, got {text!r}", code=2)
    low_ok = value >= minimum if inclusive else value > minimum
    if not low_ok:
        bound = f"at least {minimum:g}" if inclusive else f"greater than {minimum:g}"
        fail(f"{option} must be {bound}, got {text}", code=2)
    if value > maximum:
        fail(f"{option} must be at most {maximum:g}, got {text}", code=2)
    return value


def _minutes(seconds: float) -> str:
    return f"{seconds / 60.0:.2f}"


@app.command("simulate")
def simulate_command(
    gpus: str = typer.Option(..., "--gpus", metavar="INT", help="GPUs in the job."),
    days: str = typer.Option(..., "--days", metavar="DAYS", help="Wallclock to simulate."),
    rate: str = typer.Option(
        ...,
        "--failures-per-1000-node-days",
        metavar="RATE",
        help="Failure rate per 1000 node-days (RSC-1 6.5, RSC-2 2.34, Llama 3 about 3.8).",
    ),
    interval: str = typer.Option(
        ..., "--checkpoint-interval", metavar="MINUTES", help="Checkpoint interval, minutes."
    ),
    restart: str = typer.Option(
        ..., "--restart-minutes", metavar="MINUTES", help="Restart cost per failure, minutes."
    ),
    cost: str = typer.Option(
        "10",
        "--checkpoint-cost-seconds",
        metavar="SECONDS",
        help="Time a checkpoint blocks training, seconds.",
    ),
    gpus_per_node: str = typer.Option(
        "8", "--gpus-per-node", metavar="INT", help="GPUs per node (failure rates are per node)."
    ),
    seed: str = typer.Option("0", "--seed", metavar="INT", help="Random seed."),
    runs: str = typer.Option("20", "--runs", metavar="INT", help="Simulated runs to average."),
    as_json: bool = JSON_OPTION,
) -> None:
    """ETTR and the best checkpoint interval, by simulation and by the formulas, side by side."""
    n_gpus = int(parse_number("--gpus", gpus, integer=True, minimum=1, inclusive=True))
    n_days = parse_number("--days", days, maximum=MAX_DAYS)
    r_f = parse_number("--failures-per-1000-node-days", rate)
    interval_s = 60.0 * parse_number("--checkpoint-interval", interval)
    restart_s = 60.0 * parse_number("--restart-minutes", restart, inclusive=True)
    cost_s = parse_number("--checkpoint-cost-seconds", cost)
    per_node = int(
        parse_number("--gpus-per-node", gpus_per_node, integer=True, minimum=1, inclusive=True)
    )
    n_seed = int(parse_number("--seed", seed, integer=True, inclusive=True))
    n_runs = int(
        parse_number("--runs", runs, integer=True, minimum=1, inclusive=True, maximum=MAX_RUNS)
    )
    if interval_s > n_days * 86400.0:
        fail("--checkpoint-interval must be shorter than --days", code=2)

    started = time.perf_counter()
    try:
        model = FailureModel(gpus=n_gpus, gpus_per_node=per_node, failures_per_1000_node_days=r_f)
        params = SimulationParams(
            failures=model, days=n_days, interval_s=interval_s, cost_s=cost_s, restart_s=restart_s
        )
        summary = simulate(params, runs=n_runs, seed=n_seed)
        search = best_interval_by_simulation(params, runs=n_runs, seed=n_seed)
        advice = advise_interval(model, interval_s=interval_s, cost_s=cost_s, restart_s=restart_s)
    except OrchestratorError as exc:
        fail(str(exc))
    rate_s = model.rate_per_s
    result = {
        "inputs": {
            "gpus": n_gpus,
            "gpus_per_node": per_node,
            "nodes": model.nodes,
            "days": n_days,
            "failures_per_1000_node_days": r_f,
            "checkpoint_interval_s": interval_s,
            "checkpoint_cost_s": cost_s,
            "restart_s": restart_s,
            "runs": n_runs,
            "seed": n_seed,
        },
        "mtbf_s": model.mtbf_s,
        "expected_failures": rate_s * params.horizon_s,
        "simulation": summary.model_dump(),
        "simulation_best_interval_s": search.best_interval_s,
        "simulation_best_ettr": search.best_mean_ettr,
        "formulas": advice.model_dump(),
        "meta_model_holds": advice.meta_model_holds,
        "elapsed_s": time.perf_counter() - started,
    }
    if as_json:
        print_json(result)
        return

    table = Table(
        title=(
            f"{n_gpus:,} GPUs ({model.nodes:,} nodes), {r_f:g} failures/1000 node-days: "
            f"MTBF {model.mtbf_s / 3600.0:.2f} h, ~{rate_s * params.horizon_s:.0f} failures "
            f"in {n_days:g} days; {n_runs} simulated runs"
        )
    )
    table.add_column("method")
    table.add_column(f"ETTR at {_minutes(interval_s)} min", justify="right")
    table.add_column("spread: sd [min, max]", justify="right")
    table.add_column("best interval (min)", justify="right")
    table.add_column("ETTR at best", justify="right")
    table.add_row(
        "simulation",
        f"{summary.mean_ettr:.4f}",
        f"{summary.std_ettr:.4f} [{summary.min_ettr:.3f}, {summary.max_ettr:.3f}]",
        _minutes(search.best_interval_s),
        f"{search.best_mean_ettr:.4f}",
    )
    table.add_row(
        "Meta (linear)",
        f"{advice.meta_ettr:.4f}",
        "",
        _minutes(advice.meta_s),
        f"{advice.meta_ettr_at_best:.4f}",
    )
    table.add_row(
        "exponential",
        f"{advice.exponential_ettr:.4f}",
        "",
        _minutes(advice.exponential_best_s),
        f"{advice.exponential_ettr_at_best:.4f}",
    )
    # Young's and Daly's formulas give an interval only; its ETTR is the exponential model's.
    for name, best in (("Young", advice.young_s), ("Daly eq. 37", advice.daly_s)):
        table.add_row(
            name, "", "", _minutes(best), f"{exponential_ettr(best, cost_s, restart_s, rate_s):.4f}"
        )
    console.print(table)
    verdict = "holds" if advice.meta_model_holds else "does not hold: trust the simulation"
    console.print(
        f"λ(u0+Δt) = {advice.linearity:.3f} (limit {LINEAR_MODEL_LIMIT}): Meta's linear model "
        f"{verdict}. Checkpoint cost {cost_s:g} s, restart {restart_s / 60.0:g} min."
    )


def _mount_supervision() -> None:
    # Imported late: the supervisor commands pull in Temporal, `simulate` does not need it.
    from orchestrator.commands.training_supervise import register

    register(app)


_mount_supervision()
