"""BCART-PCFG (Sullivan et al. 2023): independent exact posterior draws from a box grammar."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import jax
import numpy as np

from ..data import code_features
from ..driver import run_independent
from ..pcfg import build_grammar, code_mixed_features, sample_trees
from ..pcfg.mixed import check_levels
from ..priors import TreePrior
from .._renamed import accepts_renamed
from .base import Method, independent_stats

__all__ = ["PCFG"]


@accepts_renamed("n_buckets")
@dataclass(frozen=True)
class PCFG(Method):
    """BCART-PCFG (:mod:`~bdtree_jax.pcfg`): the box grammar of the data is built once by dynamic
    programming, then every chain draws ``num_samples`` independent exact posterior trees (chain
    ``c`` uses ``fold_in(key(seed), c)``).  The posterior is a
    :class:`~bdtree_jax.posterior.PCFGPosterior`, which also answers exactly what draws only
    estimate (the MAP tree, the posterior predictive over all trees, the evidence); with
    ``num_samples=0`` there are no draws, the grammar alone.

    The prior is ``Pr[T] ∝ φ^-b(T)`` over trees with ``b`` leaves, conditioned on
    ``depth <= prior.max_depth``; ``alpha``, ``beta``, ``split_prior`` and ``min_leaf_size`` do not
    apply, and no warm-up is needed (``num_warmup`` is ignored).

    Categorical features (at most :data:`~bdtree_jax.pcfg.MAX_LEVELS` levels each; more is a
    ``ValueError`` naming the column) and missing values are exact too (:mod:`~bdtree_jax.pcfg.mixed`:
    level partitions, a missing-value bit with prior factor 1/2 on every split).

    Parameters
    ----------
    log_phi : float, default 2.0
        ``log φ`` of the prior (the paper's default 2).
    num_buckets : None, int >= 2 or one such int per feature
        Features with more distinct values are cut into that many equal-width buckets before the
        boxes are enumerated (the paper: 10); None: one code per distinct value.  Categorical
        features are never bucketed.
    unbounded : bool, default False
        Ignore the prior's ``max_depth``: trees of any depth (draws deeper than 10 levels, the
        padded heap's limit, raise an error).
    """

    log_phi: float = 2.0
    num_buckets: int | tuple | None = None
    unbounded: bool = False

    name: ClassVar[str] = "pcfg"
    min_samples: ClassVar[int] = 0
    own_prior: ClassVar[bool] = True

    def __post_init__(self):
        if not (isinstance(self.log_phi, (int, float, np.floating)) and np.isfinite(self.log_phi)):
            raise ValueError(f"log_phi must be a finite number; got {self.log_phi!r}.")
        nb = self.num_buckets
        if nb is not None:
            every = [nb] if np.isscalar(nb) else list(nb)
            if not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b >= 2 for b in every):
                raise ValueError(f"num_buckets must be None, an integer >= 2 or one such integer per feature; got {nb!r}.")
        if not isinstance(self.unbounded, (bool, np.bool_)):
            raise ValueError(f"unbounded must be True or False; got {self.unbounded!r}.")

    def check(self, problem, where=""):
        super().check(problem, where)
        if problem.prior.min_leaf_size != 1:
            raise ValueError(f"{where}min_leaf_size is not part of the PCFG prior (every leaf holds >= 1 row); leave "
                             "it at 1.")
        if problem.grid.level_count is not None:
            check_levels(problem.grid.level_count, problem.names, where)
        nb = self.num_buckets
        if nb is not None and not np.isscalar(nb) and len(nb) != problem.n_features:
            raise ValueError(f"{where}num_buckets has {len(nb)} entries; X has {problem.n_features} features.")

    def run(self, problem, options=None, tempering=None, *, where=""):
        options, _ = self._start(problem, options, tempering, where)
        max_depth = None if self.unbounded else problem.prior.max_depth
        grid, mixed = problem.grid, problem.grid.missing_code is not None
        if mixed:  # categorical features or missing cells: level partitions and missing-value bits
            codes, boundary_cut = code_mixed_features(problem.X, grid.categorical, self.num_buckets)
            extra = dict(categorical=grid.categorical, level_count=grid.level_count)
        else:
            codes, boundary_cut = code_features(problem.X, self.num_buckets)
            extra = {}
        t0 = time.perf_counter()
        grammar = build_grammar(codes, problem.train_stats, problem.likelihood, log_phi=float(self.log_phi),
                                max_depth=max_depth, boundary_cut=boundary_cut, where=where, **extra)
        seconds_grammar = time.perf_counter() - t0
        num_samples = options.num_samples
        trees, log_lik, leaves = run_independent(
            lambda key, g: sample_trees(g, key, num_samples, where=where), grammar, key=jax.random.key(options.seed),
            # num_samples=0: the grammar alone (exact MAP tree, predictive, log_prob, paths)
            num_chains=options.num_chains if num_samples else 1, progress=options.progress,
            checkpoint=options.checkpoint, fingerprint=(self.name, num_samples), description=self.name,
        )
        log_prior = -float(self.log_phi) * leaves.astype(np.int32)
        if mixed:  # each split's missing-value bit: 1/2
            log_prior = log_prior + grammar.split_log_weight * (leaves.astype(np.int32) - 1)
        stats, warm = independent_stats(trees, log_lik, log_prior, n_leaves=leaves)
        fields = dict(problem.posterior_fields(), prior=TreePrior(max_depth=grammar.heap_depth))
        info = dict(seed=options.seed, num_samples=num_samples, seconds=time.perf_counter() - t0,
                    seconds_grammar=seconds_grammar, n_boxes=grammar.n_boxes, log_phi=float(self.log_phi),
                    max_depth=max_depth, num_buckets=self.num_buckets)
        from ..posterior import PCFGPosterior

        return PCFGPosterior(trees=trees, stats=stats, warmup_stats=warm, method=self.name, info=info, grammar=grammar,
                             **fields)
