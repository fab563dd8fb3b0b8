"""Sampling until the chains have converged: :class:`Converged` (``RunOptions.run_until``).

A run with ``run_until=Converged(...)`` starts as the run without it (``num_warmup``, then
``num_samples`` draws kept every ``thin`` iterations) and checks its draws with
:func:`~bdtree_jax.diagnostics.convergence_diagnostics`.  While a checked quantity misses a target
(R-hat above ``rhat`` or bulk ESS below ``ess``) and the budget allows, it goes on in rounds: each
round doubles ``thin`` and runs the chains on from where they stopped for as many iterations again,
keeping every second of the draws it had (those of the doubled ``thin``) and the new ones.  The
memory stays that of ``num_samples`` draws whatever the length, each round halves the
autocorrelation between kept draws, and the result is bit-identical to one run with the final
``thin`` (same seed, same draws: the chains' keys depend on the iteration only).  With a
``checkpoint`` file every round writes it as it goes and an interrupted run resumes from the round
and iteration it had reached.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import jax
import numpy as np
from .._validate import is_int

__all__ = ["Converged", "run_rounds", "round_thins", "keep_every_second"]


@dataclass(frozen=True)
class Converged:
    """Keep sampling until the chains pass the convergence check, within a budget.

    Parameters
    ----------
    rhat : float > 1, default 1.01
        Largest rank-normalised split R-hat accepted for every checked quantity (the
        log-likelihood, the number of leaves and the predictive mean: the quantities of
        :func:`~bdtree_jax.diagnostics.convergence_diagnostics`).
    ess : float > 0, default 400
        Smallest bulk ESS accepted for each of them (all chains together).
    max_iterations : int >= 1, default 100_000
        Budget: iterations per chain after warm-up.  The rounds double ``thin`` while
        ``num_samples * thin`` stays within it (the first round always runs).
    max_seconds : float > 0 or None, default None
        A second budget in wall-clock seconds: no new round starts when the previous rounds'
        pace says it would end after it.  A time budget makes where the run stops depend on the
        machine; the iteration budget alone keeps a seed's draws the same everywhere.

    Examples
    --------
    >>> import bdtree_jax as bd
    >>> X, y = bd.datasets.load("iris")
    >>> post = bd.sample(X, y, num_samples=200, run_until=bd.Converged(max_iterations=20_000))  # doctest: +SKIP
    >>> post.info["run_until"]                                                                # doctest: +SKIP
    {'converged': True, 'rounds': 3, 'thin': 4, ...}
    """

    rhat: float = 1.01
    ess: float = 400.0
    max_iterations: int = 100_000
    max_seconds: float | None = None

    def __post_init__(self):
        for name, low in (("rhat", 1.0), ("ess", 0.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(value) or value <= low:
                raise ValueError(f"Converged: {name} must be a finite number > {low:g}; got {value!r}.")
        value = self.max_iterations
        if not is_int(value) or value < 1:
            raise ValueError(f"Converged: max_iterations must be an integer >= 1; got {value!r}.")
        value = self.max_seconds
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating))
                                  or not math.isfinite(value) or value <= 0):
            raise ValueError(f"Converged: max_seconds must be None or a finite number > 0; got {value!r}.")

    def misses(self, diagnostics: dict) -> list[str]:
        """The checked quantities of ``diagnostics`` (:func:`~bdtree_jax.diagnostics.convergence_diagnostics`)
        that miss a target; NaN (one chain, or a quantity that never moves) misses none."""
        return [name for name, d in diagnostics.items()
                if d.get("rhat", math.nan) > self.rhat or d.get("ess_bulk", math.nan) < self.ess]


def round_thins(thin: int, num_samples: int, max_iterations: int) -> list[int]:
    """The ``thin`` of every round a run may take: ``thin``, ``2 thin``, ``4 thin`` ... while
    ``num_samples * thin <= max_iterations`` (the first always)."""
    thins = [thin]
    while num_samples * thins[-1] * 2 <= max_iterations:
        thins.append(thins[-1] * 2)
    return thins


def keep_every_second(traces, num_warmup: int):
    """The traces a run with twice the ``thin`` records: every warm-up iteration, then the
    second, fourth ... kept draw (``num_warmup + 2 k thin - 1``).

    ``traces``: pytree of host arrays ``(chains, num_warmup + S, ...)``; returns arrays
    ``(chains, num_warmup + S // 2, ...)``."""
    return jax.tree.map(lambda a: np.concatenate([a[:, :num_warmup], a[:, num_warmup + 1 :: 2]], axis=1), traces)


def run_rounds(until: Converged, thin: int, num_warmup: int, num_samples: int, run_for, diagnose,
               first_round: int = 0):
    """The rounds of a ``run_until`` run.

    Parameters
    ----------
    until : Converged
    thin, num_warmup, num_samples : the run's options (``thin`` of the first round).
    run_for : ``(thin, resume) -> (traces, states)``: the run of ``num_warmup + num_samples * thin``
        iterations (:func:`~bdtree_jax.driver.run_chains`, going on from ``resume``).
    diagnose : ``(traces, thin) -> (result, diagnostics)``: the posterior of the traces and its
        :func:`~bdtree_jax.diagnostics.convergence_diagnostics`.
    first_round : the round to start at (a checkpoint of that round resumes it).

    Returns
    -------
    (result, report): the last round's posterior and ``{"converged": bool, "rounds": int,
    "thin": int, "iterations": int, "missed": [names]}`` (iterations per chain after warm-up).
    """
    thins = round_thins(thin, num_samples, until.max_iterations)
    resume, t0 = None, time.perf_counter()
    last_round_seconds = 0.0
    for r in range(first_round, len(thins)):
        t_round = time.perf_counter()
        traces, states = run_for(thins[r], resume)
        result, diagnostics = diagnose(traces, thins[r])
        missed = until.misses(diagnostics)
        last_round_seconds = time.perf_counter() - t_round
        over_time = until.max_seconds is not None and (
            time.perf_counter() - t0 + 2 * last_round_seconds > until.max_seconds)
        if not missed or r == len(thins) - 1 or over_time:
            break
        resume = dict(start=num_warmup + num_samples * thins[r], chunks=[keep_every_second(traces, num_warmup)],
                      states=states)
    report = dict(converged=not missed, rounds=r + 1, thin=int(thins[r]), iterations=int(num_samples * thins[r]),
                  missed=list(missed))
    return result, report
