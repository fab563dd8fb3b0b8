"""WU: Wu, Tjelmeland & West (2007)'s schedule of CGM steps around a restructure move."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..kernels import cgm as cgm_kernel, wu as wu_kernel
from ..priors.categorical import check_general_rules, general_rules
from .._renamed import accepts_renamed
from .base import Kernel, MCMCMethod, check_integer, with_tempering
from .cgm import CGM_MOVE_PROBS

__all__ = ["WU"]


@accepts_renamed("n_local")
@dataclass(frozen=True)
class WU(MCMCMethod):
    """Wu, Tjelmeland & West (2007) (:mod:`~bdtree_jax.kernels.wu`): per iteration
    ``num_local_steps`` CGM steps, one restructure move that redraws the tree over its fixed leaf partition, and
    ``num_local_steps`` CGM steps.  Samples the CGM98 and the pinball structure priors.  With
    categorical features or missing values (docs/categorical-missing.md) the local steps are the
    general-rule CGM chain and the restructure the Metropolis–Hastings move over the rules that
    keep every leaf group on one side (CGM98 prior only, no fibre-Gibbs draw).

    Parameters
    ----------
    num_local_steps : int >= 1, default 25
        CGM steps before and after each restructure (the paper's protocol: 25).
    restructure : {"auto", "pi", "gibbs"}, default "auto"
        "auto": the exact fibre-Gibbs draw (always accepted) when the tree has at most
        ``max_groups`` leaves, else the Metropolis–Hastings move with Variant Π; "pi": always the
        MH move; "gibbs": always the Gibbs draw (needs ``2**max_depth <= max_groups``).  With
        categorical features or missing values "auto" is the MH move and "gibbs" is refused.
    max_groups : int in [2, 12], default 10
        The most leaves the Gibbs draw handles.
    move_probs : (4,) tuple, default (0.25, 0.25, 0.40, 0.10)
        The local CGM steps' (grow, prune, change, swap) probabilities.
    """

    num_local_steps: int = 25
    restructure: str = "auto"
    max_groups: int = 10
    move_probs: tuple = CGM_MOVE_PROBS

    name: ClassVar[str] = "wu"
    structures: ClassVar[tuple] = ("cgm", "pinball")

    def __post_init__(self):
        check_integer("num_local_steps", self.num_local_steps, 1)
        wu_kernel.check_restructure(self.restructure, self.max_groups, 1)
        cgm_kernel.CGMConfig(1, 1, self.move_probs)  # validates move_probs
        object.__setattr__(self, "move_probs", tuple(self.move_probs))

    def check(self, problem, where=""):
        super().check(problem, where)
        if general_rules(problem.data):
            check_general_rules(problem.data, problem.prior.structure, f"{where}method='wu'")
            if self.restructure == "gibbs":
                raise ValueError(f"{where}method='wu': restructure='gibbs' (the fibre-Gibbs draw) is not available with "
                                 "categorical features or missing values; use restructure='auto' or 'pi' (the "
                                 "Metropolis-Hastings move).")
        wu_kernel.check_restructure(self.restructure, self.max_groups, problem.prior.max_depth, where=where)

    def kernel(self, problem, chain_method, betas, num_warmup, where=""):
        config = cgm_kernel.CGMConfig.from_prior(
            problem.prior, self.move_probs, n_features=problem.data.bins.shape[1],
            n_cuts=int(problem.grid.n_cuts.max()), incremental=chain_method == "loop",
            general_rules=general_rules(problem.data),
        )
        wu_config = wu_kernel.WUConfig(config, int(self.num_local_steps), restructure=self.restructure,
                                       max_groups=self.max_groups)
        algorithm = with_tempering(wu_kernel.wu(wu_config), betas, chain_method)
        return Kernel(problem.data, (wu_config, tuple(betas)), algorithm)
