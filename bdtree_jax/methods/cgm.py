"""CGM: Chipman, George & McCulloch (1998)'s Metropolis–Hastings sampler over hard trees, with its
variants (prune-and-regrow, perturb) and the edit prior around an initial tree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ..driver import CGM_BLOCK_SIZE
from ..kernels import cgm as cgm_kernel, edit as edit_kernel, perturb as perturb_kernel, regrow as regrow_kernel
from ..kernels import informed_change as informed_kernel
from ..kernels._moves import score
from ..priors import check_valid_cuts, violates_boxes
from ..priors.boxes import violates_boxes_general
from ..priors.categorical import check_general_rules, general_rules

from .base import Kernel, MCMCMethod, with_tempering
from .._validate import check_one_of

__all__ = ["CGM", "CGM_MOVE_PROBS", "PROPOSALS", "PINBALL_PROPOSALS"]

#: CGM's default (grow, prune, change, swap) probabilities.
CGM_MOVE_PROBS = cgm_kernel.MOVE_PROBS
PROPOSALS = ("cgm", "regrow", "cgm+regrow", "cgm+perturb", "cgm+informed")
#: The proposals whose MH ratios use the full prior ratio, hence any ``structure``.
PINBALL_PROPOSALS = ("cgm", "cgm+perturb")


@dataclass(frozen=True)
class CGM(MCMCMethod):
    """Chipman, George & McCulloch (1998): Metropolis–Hastings over hard trees.

    Each iteration proposes a change of the tree and accepts it with its MH probability under the
    tree prior times the integrated likelihood (:mod:`~bdtree_jax.kernels.cgm`).  Chains start at
    the stump (or at ``initial_tree``).

    Parameters
    ----------
    proposal : {"cgm", "regrow", "cgm+regrow", "cgm+perturb", "cgm+informed"}, default "cgm"
        "cgm": grow / prune / change / swap.  "regrow": prune a uniformly chosen node's subtree
        and regrow it from the prior (Angelopoulos & Cussens 2005;
        :mod:`~bdtree_jax.kernels.regrow`).  "cgm+regrow": one of each per iteration.
        "cgm+perturb": one CGM proposal and one perturb proposal per iteration (an internal
        node's cut moved within a window, or its feature changed; Pratola 2016); the window adapts
        towards 44 % acceptance during warm-up and is fixed afterwards
        (:mod:`~bdtree_jax.kernels.perturb`; with categorical features or missing values a
        categorical rule moves some of its levels to the other side and the missing-value bit is
        redrawn).  "cgm+informed": one CGM proposal and one informed change: a uniformly chosen
        splitting node's rule (feature and cut) is proposed from every rule of the grid weighted
        by the tree's likelihood with it, and accepted by its exact MH ratio
        (:mod:`~bdtree_jax.kernels.informed_change`; numeric data only).  ``structure="pinball"`` needs "cgm"
        or "cgm+perturb"; ``valid_cuts="ancestors"`` needs "cgm".
    move_probs : (4,) tuple of float, default (0.25, 0.25, 0.40, 0.10)
        Probabilities of grow, prune, change and swap (grow and prune > 0, summing to 1).
    box_constraints : list of dicts or None
        Regions ``{feature: (low, high)}`` (column name or index; None or ``±inf`` for an open
        side) declared to have a constant response distribution: the prior is conditioned on no
        rule cutting through a box (every box lies inside one leaf).
    initial_tree : Tree, tree string, fitted scikit-learn decision tree, or None
        The EDITTREE prior (:mod:`~bdtree_jax.kernels.edit`): trees obtained from
        ``initial_tree`` by a truncated geometric number of random grow / prune / change edits.
        Chains start at ``initial_tree``; ``proposal`` "cgm" appends / deletes single edits,
        "regrow" backtracks to a uniformly chosen edit and regrows the rest, "cgm+regrow" mixes
        them half and half ("cgm+perturb" and ``move_probs`` do not apply).  With categorical
        features or missing values: a tree string with ``x{f}in{a,b}`` level sets and ``|NA=L`` /
        ``|NA=R`` on every rule (or a MixedTree), edits drawing whole rules from the general rule
        prior.
    mean_edits : float > 0, default 2.0
        The edit prior's mean number of edits (untruncated geometric law).
    max_edits : int >= 1, default 20
        Its truncation.

    Examples
    --------
    >>> import bdtree_jax as bd
    >>> X, y = bd.datasets.load("iris")
    >>> post = bd.sample(X, y, method=bd.CGM(proposal="cgm+regrow"), prior=bd.TreePrior(max_depth=3),
    ...                  num_warmup=100, num_samples=100, num_chains=2)
    >>> post.trees.is_split.shape
    (2, 100, 15)
    """

    proposal: str = "cgm"
    move_probs: tuple = CGM_MOVE_PROBS
    box_constraints: Any = None
    initial_tree: Any = None
    mean_edits: float = 2.0
    max_edits: int = 20

    name: ClassVar[str] = "cgm"
    default_block_size: ClassVar[int] = CGM_BLOCK_SIZE
    structures: ClassVar[tuple] = ("cgm", "pinball")

    def __post_init__(self):
        check_one_of("proposal", self.proposal, PROPOSALS)
        cgm_kernel.CGMConfig(1, 1, self.move_probs)  # validates move_probs
        object.__setattr__(self, "move_probs", tuple(self.move_probs))
        if self.initial_tree is None:
            return
        if self.proposal in ("cgm+perturb", "cgm+informed"):
            raise ValueError(f"proposal={self.proposal!r} does not apply with initial_tree (the edit prior has its own "
                             "moves: 'cgm', 'regrow' or 'cgm+regrow').")
        if tuple(float(p) for p in self.move_probs) != CGM_MOVE_PROBS:
            raise ValueError("move_probs does not apply with initial_tree (the edit prior fixes its moves).")
        try:
            edit_kernel.EditConfig(1, mean_edits=self.mean_edits, max_edits=self.max_edits)
        except TypeError as e:
            raise ValueError(str(e)) from None

    def check(self, problem, where=""):
        structure = problem.prior.structure
        if structure != "cgm" and self.proposal not in PINBALL_PROPOSALS:
            raise ValueError(f"{where}structure={structure!r} needs proposal in {PINBALL_PROPOSALS}; "
                             f"proposal={self.proposal!r} regrows subtrees from the CGM98 prior.")
        if structure != "cgm" and self.initial_tree is not None:
            raise ValueError(f"{where}structure={structure!r} does not apply with initial_tree (the edit prior is a "
                             "prior of its own).")
        if (self.box_constraints is None) != (problem.box_constraints is None):
            raise ValueError(f"{where}the problem was built with box_constraints={problem.box_constraints!r} and the "
                             f"method has box_constraints={self.box_constraints!r}; build it with "
                             "build_problem(..., **method.problem_options()).")
        super().check(problem, where)

    def problem_options(self) -> dict:
        return dict(box_constraints=self.box_constraints)

    def _ancestors_supported(self) -> bool:
        return self.proposal == "cgm"

    def kernel(self, problem, chain_method, betas, num_warmup, where=""):
        prior, data = problem.prior, problem.data
        general = general_rules(data)
        if general:
            check_general_rules(data, prior.structure, f"{where}method='cgm'", boxes=True)
        if self.initial_tree is not None:
            config = edit_kernel.EditConfig(
                prior.max_depth, prior.min_leaf_size, regrow_prob={"cgm": 0.0, "regrow": 1.0}.get(self.proposal, 0.5),
                mean_edits=float(self.mean_edits), max_edits=int(self.max_edits), general_rules=general,
            )
            check_valid_cuts(data, f"{where}The edit prior (initial_tree)")
            edit_data = self._edit_data(problem, where)
            algorithm = with_tempering(edit_kernel.edit_prior(config), betas, chain_method)
            return Kernel(edit_data, (config, self.proposal, betas), algorithm)
        config = cgm_kernel.CGMConfig.from_prior(
            prior, self.move_probs, n_features=data.bins.shape[1], n_cuts=int(problem.grid.n_cuts.max()),
            incremental=chain_method == "loop", general_rules=general,
        )
        regrow_config = regrow_kernel.RegrowConfig(config.max_depth, config.min_leaf_size, config.trace_dtypes)
        if self.proposal == "cgm+perturb":
            perturb_config = perturb_kernel.PerturbConfig.from_cgm(config, num_warmup=int(num_warmup))
            check_valid_cuts(data, f"{where}The perturb move (proposal='cgm+perturb')")
            algorithm = perturb_kernel.with_perturb(config, perturb_config)
            return Kernel(data, (config, perturb_config, self.proposal, betas),
                          with_tempering(algorithm, betas, chain_method))
        if self.proposal == "cgm+informed" and general:
            raise ValueError(f"{where}proposal='cgm+informed' (the informed change move) supports numeric features without "
                             "missing values; use proposal='cgm' or 'cgm+perturb' with categorical features or missing "
                             "cells.")
        if self.proposal in ("regrow", "cgm+regrow"):
            check_valid_cuts(data, f"{where}prune-and-regrow (proposal {self.proposal!r})")
        elif self.proposal != "cgm":
            check_valid_cuts(data, f"{where}The informed change move (proposal {self.proposal!r})")
        algorithm = {"cgm": cgm_kernel.cgm, "regrow": lambda _: regrow_kernel.regrow(regrow_config),
                     "cgm+regrow": regrow_kernel.with_regrow,
                     "cgm+informed": informed_kernel.with_informed_change}[self.proposal](config)
        return Kernel(data, (config, regrow_config, self.proposal, betas), with_tempering(algorithm, betas, chain_method))

    def _edit_data(self, problem, where: str) -> edit_kernel.EditData:
        """The edit prior's data: the training data and the initial tree, checked against the
        prior's support and the boxes (before anything is compiled)."""
        prior = problem.prior
        data = problem.data
        config = cgm_kernel.CGMConfig(prior.max_depth, prior.min_leaf_size)
        general = general_rules(data)
        tree = edit_kernel.initial_tree(
            self.initial_tree, X=problem.X, bins=problem.train_bins, thresholds=problem.grid.thresholds,
            max_depth=prior.max_depth, level_count=problem.grid.level_count, nan_bits=data.missing_code is not None,
            where=where,
        )
        tree = jax.tree.map(lambda a: jnp.asarray(a), tree)
        with jax.disable_jit():
            plain = score(tree, data._replace(box_side=None), config, 1.0)
            if not np.isfinite(float(plain.log_prior)):
                raise ValueError(f"{where}initial_tree is outside the prior's support: " + (
                    "some rule is not available at its node's rows (an ordered cut without a row with a value on "
                    "each side, or a level set that is empty, names a level absent from the node's rows with a "
                    "value, or holds the smallest of them: write the other side's levels instead)." if general else
                    f"some split leaves a child with fewer than min_leaf_size={prior.min_leaf_size} training rows "
                    "(or no valid cut is left at a node)."))
            if data.box_side is not None and bool(violates_boxes_general(tree, data.box_side, data.box_levels)
                                                  if general else violates_boxes(tree, data.box_side)):
                raise ValueError(f"{where}initial_tree splits inside one of the box_constraints.")
        return edit_kernel.EditData(data, tree)

    def _info(self, kernel, betas, problem):
        edit = None
        if self.initial_tree is not None:
            edit = dict(mean_edits=float(self.mean_edits), max_edits=int(self.max_edits),
                        initial_tree=repr(self.initial_tree))
        return dict(proposal=self.proposal, betas=betas, box_constraints=self.box_constraints, edit=edit)
