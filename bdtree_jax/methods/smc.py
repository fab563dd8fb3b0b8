"""Top-down SMC (Lakshminarayanan, Roy & Teh 2013): independent particle-filter runs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ..driver import run_independent
from .._renamed import accepts_renamed
from ..kernels import smc as smc_kernel
from .base import Method, independent_stats
from .._validate import is_int

__all__ = ["SMC"]


@accepts_renamed("n_islands")
@dataclass(frozen=True)
class SMC(Method):
    """Top-down particle filtering on the CGM98 prior (:mod:`~bdtree_jax.kernels.smc`).

    Each chain is an independent SMC run (chain ``c`` uses ``fold_in(key(seed), c)``); its
    ``num_samples`` draws are resampled (multinomially, with replacement) from the run's final
    weighted particles, and ``num_warmup`` is not used.  The posterior is an
    :class:`~bdtree_jax.posterior.SMCPosterior`, with the evidence estimate ``log_evidence``.

    Parameters
    ----------
    num_particles : int >= 1, default 100
        Particles per run.
    num_islands : int >= 1 dividing ``num_particles``, default 1
        Independent particle systems, each resampling on its own.
    proposal : {"prior", "posterior"}, default "prior"
        How a particle decides its next node: from the prior, or the one-step-optimal proposal.
    grow : {"next", "layer"}, default "next"
        A stage decides one node per particle ("next", node-wise) or a whole depth level.
    resampling : {"multinomial", "systematic"}, default "multinomial"
    ess_threshold : float in [0, 1], default 0.1
        An island resamples when its effective sample size falls to ``ess_threshold`` times its
        particles (0: never, 1: after every stage).

    Categorical features and missing values (docs/categorical-missing.md) are sampled with
    either proposal; "posterior" scores every partition of a categorical feature's levels and
    supports features of at most 8 levels (more: a ``ValueError`` suggesting "prior").
    """

    num_particles: int = 100
    num_islands: int = 1
    proposal: str = "prior"
    grow: str = "next"
    resampling: str = "multinomial"
    ess_threshold: float = 0.1

    name: ClassVar[str] = "smc"
    min_samples: ClassVar[int] = 0

    def __post_init__(self):
        smc_kernel.check_options(self.num_particles, self.proposal, self.ess_threshold, self.resampling,
                                 grow=self.grow)
        islands = self.num_islands
        if not is_int(islands) or islands < 1 \
                or self.num_particles % islands:
            raise ValueError(f"num_islands must be an integer >= 1 dividing num_particles={self.num_particles}; "
                             f"got {islands!r}.")

    def run(self, problem, options=None, tempering=None, *, where=""):
        options, _ = self._start(problem, options, tempering, where)
        prior = problem.prior
        config = smc_kernel.SMCConfig(prior.max_depth, prior.min_leaf_size, int(self.num_particles), self.proposal,
                                      float(self.ess_threshold), self.resampling, self.grow, int(self.num_islands))
        smc_kernel.check_data(problem.data, problem.grid, self.proposal, prior.structure, problem.names,
                              f"{where}method='smc'")
        n_bins = smc_kernel.n_codes(problem.grid)
        key = jax.random.key(options.seed)
        t0 = time.perf_counter()
        # the threshold travels with the data: one program for every ess_threshold
        runs = run_independent(
            smc_kernel.threshold_run(config, n_bins), (problem.data, np.float32(self.ess_threshold)), key=key,
            num_chains=options.num_chains,
            progress=options.progress, checkpoint=options.checkpoint, fingerprint=(self.name, config, n_bins),
            devices=options.devices, jittable=True, description=self.name,
        )
        seconds = time.perf_counter() - t0
        chains = np.arange(options.num_chains)[:, None]
        draws = np.stack([self._resample(jax.random.fold_in(key, c), runs.log_weight[c], options.num_samples)
                          for c in range(options.num_chains)])
        trees = jax.tree.map(lambda a: np.asarray(a)[chains, draws], runs.trees)
        stats, warm = independent_stats(trees, np.asarray(runs.log_lik)[chains, draws],
                                        np.asarray(runs.log_prior)[chains, draws])
        info = dict(seed=options.seed, num_samples=options.num_samples, seconds=seconds, config=repr(config),
                    num_particles=int(self.num_particles), proposal=self.proposal,
                    n_stages=[int(n) for n in runs.n_stages], n_resampled=[int(n) for n in runs.n_resampled])
        from ..posterior import SMCPosterior

        return SMCPosterior(
            trees=trees, stats=stats, warmup_stats=warm, method=self.name, info=info,
            particles=jax.tree.map(lambda a: np.asarray(a), runs.trees), particle_log_weights=np.asarray(runs.log_weight),
            run_log_evidence=np.asarray(runs.log_evidence).astype(np.float64), **problem.posterior_fields(),
        )

    @staticmethod
    def _resample(chain_key, log_weight, num_samples: int) -> np.ndarray:
        """(num_samples,) indices of a run's particles drawn by their final weights."""
        key = jax.random.fold_in(chain_key, 2**31 - 1)  # not a stage key (stages < 2**31 - 1)
        return np.asarray(jax.random.categorical(key, jnp.asarray(log_weight), shape=(num_samples,)))
