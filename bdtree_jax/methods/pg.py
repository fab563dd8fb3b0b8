"""Particle Gibbs (Lakshminarayanan, Roy & Teh 2015): an MCMC chain of conditional SMC sweeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..kernels import cgm as cgm_kernel, pg as pg_kernel, smc as smc_kernel
from .base import Kernel, MCMCMethod, with_tempering

__all__ = ["PG"]


@dataclass(frozen=True)
class PG(MCMCMethod):
    """Particle Gibbs (:mod:`~bdtree_jax.kernels.pg`): every iteration is a conditional top-down
    SMC sweep on the CGM98 prior with the chain's current tree as the reference particle; the
    new tree is drawn from the final particles (multinomial resampling before every stage).

    Parameters
    ----------
    num_particles : int >= 1, default 10
        Particles of each sweep, the reference included.
    proposal : {"prior", "posterior"}, default "prior"
        How a particle decides its next node: from the prior, or the one-step-optimal proposal.
        ``valid_cuts="ancestors"`` needs "prior".

    Categorical features and missing values (docs/categorical-missing.md) are sampled with
    either proposal (tempered or not); "posterior" scores every partition of a categorical
    feature's levels and supports features of at most 8 levels (more: a ``ValueError``
    suggesting "prior").
    """

    num_particles: int = 10
    proposal: str = "prior"

    name: ClassVar[str] = "pg"

    def __post_init__(self):
        smc_kernel.check_options(self.num_particles, self.proposal, 1.0, "multinomial")

    def _ancestors_supported(self) -> bool:
        return self.proposal == "prior"

    def kernel(self, problem, chain_method, betas, num_warmup, where=""):
        prior, n_cuts = problem.prior, int(problem.grid.n_cuts.max())
        smc_kernel.check_data(problem.data, problem.grid, self.proposal, prior.structure, problem.names,
                              f"{where}method='pg'")
        n_bins = smc_kernel.n_codes(problem.grid)  # bins or levels
        config = pg_kernel.PGConfig(
            prior.max_depth, prior.min_leaf_size, int(self.num_particles), self.proposal, n_bins=n_bins,
            trace_dtypes=cgm_kernel.CGMConfig.from_prior(
                prior, n_features=problem.data.bins.shape[1], n_cuts=n_cuts).trace_dtypes,
        )
        algorithm = with_tempering(pg_kernel.particle_gibbs(config), betas, chain_method)
        return Kernel(problem.data, (config, tuple(betas)), algorithm)

    def _info(self, kernel, betas, problem):
        return dict(super()._info(kernel, betas, problem), num_particles=int(self.num_particles))
