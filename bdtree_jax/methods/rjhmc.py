"""RJHMC-Tree (Cochrane et al. 2023): reversible-jump MCMC over soft trees with NUTS legs."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from ..kernels import tempering as tempering_kernel
from ..kernels.rjhmc import RJHMCConfig, is_number, rjhmc
from ..soft import minmax_scaler
from .base import Kernel, MCMCMethod
from .._validate import check_one_of

__all__ = ["RJHMC", "KINDS"]

KINDS = ("df", "dfi")


#: RJHMC regression warns when y's standard deviation lies outside this range (its priors are in y's units).
Y_SD_RANGE = (1e-2, 1e2)

#: Default split sharpness (None), ``{task: {kind: (h_init, h_final)}}``: regression the cgm configs'
#: values (sharp splits, found by the scored cuts and change moves), classification the paper's 0.025
#: (no scored cuts: at sharp h NUTS cannot move a threshold across a data point; docs/methods/rjhmc.md).
H_DEFAULTS = {"regression": {"df": (0.001, 0.001), "dfi": (0.01, 0.001)},
              "classification": {"df": (0.025, 0.025), "dfi": (0.025, 0.025)}}
#: Default (warm-up, sampling) move probabilities: (grow, prune, stay) ...
MOVE_PROBS = ((0.5, 0.25, 0.25), (0.2, 0.2, 0.6))
#: ... and (grow, prune, change, stay) where change moves apply (regression, conditional rules).
CHANGE_MOVE_PROBS = ((0.4, 0.2, 0.2, 0.2), (0.2, 0.2, 0.2, 0.4))


@dataclass(frozen=True)
class RJHMC(MCMCMethod):
    """RJHMC-Tree on soft trees (:mod:`~bdtree_jax.kernels.rjhmc`): every iteration proposes a
    grow, prune or stay of the topology and moves the continuous parameters (thresholds, leaf
    parameters) with NUTS legs; the split sharpness ``h`` is annealed during warm-up.  The
    posterior is a :class:`~bdtree_jax.posterior.SoftTreePosterior`.

    The tree prior is the problem's ``alpha (1 + depth)**-beta`` up to ``max_depth`` (at most 10),
    conditioned on the root splitting; ``min_leaf_size``, ``split_prior``, ``valid_cuts`` and
    ``structure`` do not apply.  Classification uses the Dirichlet ``concentration``; regression
    its own leaf priors (``mu_bar`` sets the leaf mean's prior mean, default 0; ``nu``, ``lam``,
    ``a`` do not apply).

    Parameters
    ----------
    kind : {"df", "dfi"}, default "df"
        "df" (method name "hmc-df"): one split feature per node; "dfi" ("hmc-dfi"): simplex
        weights over the features.
    schedule : {"fast", "paper"}, default "fast"
        "fast": one global NUTS adaptation during warm-up, then ``leg_steps`` NUTS transitions per
        leg; "paper": 500 NUTS warm-up steps and one draw per leg, as the reference code.
    h_init, h_final : float > 0 or None
        Split sharpness (``P(right) = sigmoid((x - tau) / h)`` on min-max scaled inputs),
        annealed from ``h_init`` down to ``h_final`` during warm-up.  None: regression 0.001
        (``h_init`` 0.01 for "dfi"), as the cgm configs; classification 0.025, as before (no scored
        cuts there to find sharp thresholds; docs/methods/rjhmc.md, "Defaults").  A given
        ``h_init`` lowers the default ``h_final`` to it, a given ``h_final`` raises ``h_init``.
    leg_steps : int >= 1, default 4
        NUTS transitions per leg ("fast").
    move_probs : (3,) or (4,) tuple or None
        (grow, prune, stay) or (grow, prune, change, stay) after warm-up.  A change (regression
        with ``split_proposal="conditional"``) redraws the rule of a node whose children are
        leaves from the scored cuts.  None: (0.2, 0.2, 0.2, 0.4) where change moves apply,
        else (0.2, 0.2, 0.6).
    warmup_move_probs : (3,) or (4,) tuple or None
        The same during warm-up; None: (0.4, 0.2, 0.2, 0.2) where change moves apply, else
        (0.5, 0.25, 0.25).
    max_tree_depth : int >= 1, default 5
        NUTS's largest trajectory doubling (at most ``2**max_tree_depth - 1`` gradients per
        transition).  At sharp ``h`` on gridded inputs trajectories hit 10 at ~20x the cost for
        no gain (docs/methods/rjhmc.md).
    leaf_proposal : {"conditional", "prior"}, default "conditional"
        Regression: at a grow or prune the leaf means of the node and its children are drawn from
        their Gaussian full conditional under the proposed topology ("conditional"), or the
        paper's jump keeps them (the new leaf takes a prior draw: "prior").  Classification has
        no leaf parameters (they are integrated out), so it does not apply.
    split_proposal : {"conditional", "prior"}, default "conditional"
        Regression: a grown node's rule is drawn from a mixture of the prior and cuts scored by the
        marginal likelihood of the node's rows ("conditional"; exact, both directions' densities
        in the ratio), or is the slot's padded prior draw as in the paper ("prior").
    """

    kind: str = "df"
    schedule: str = "fast"
    h_init: float | None = None
    h_final: float | None = None
    leg_steps: int = 4
    move_probs: tuple | None = None
    warmup_move_probs: tuple | None = None
    max_tree_depth: int = 5
    leaf_proposal: str = "conditional"
    split_proposal: str = "conditional"

    own_prior: ClassVar[bool] = True

    def __post_init__(self):
        check_one_of("kind", self.kind, KINDS)
        for name in ("move_probs", "warmup_move_probs"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))
        try:
            # regression accepts every option classification does, and change moves too (a
            # classifier with them is refused when its kernel is built, before compiling)
            self.config("regression", max_depth=1, num_warmup=0)
        except (ValueError, TypeError) as e:
            raise ValueError(str(e).removeprefix("RJHMCConfig: ")) from None

    @property
    def name(self) -> str:
        """"hmc-df" or "hmc-dfi"."""
        return f"hmc-{self.kind}"

    def changes(self, task: str) -> bool:
        """Whether change moves apply (regression with ``split_proposal="conditional"``): the
        default move probabilities include them there."""
        return task == "regression" and self.split_proposal == "conditional"

    def h(self, task: str) -> tuple:
        """(h_init, h_final) for a task: ``H_DEFAULTS`` where None, ``h_init`` raised to a given
        ``h_final`` and ``h_final`` lowered to a given ``h_init``."""
        h_init, h_final = H_DEFAULTS[task][self.kind]
        if self.h_final is not None:
            h_final = self.h_final
        elif is_number(self.h_init):
            h_final = min(h_final, self.h_init)
        if self.h_init is not None:
            h_init = self.h_init
        elif is_number(h_final):
            h_init = max(h_init, h_final)
        return h_init, h_final

    def config(self, task: str, *, max_depth: int, num_warmup: int, alpha: float = 0.95, beta: float = 1.0,
               n_classes: int = 2, concentration: float = 1.0, mu_mean: float = 0.0) -> RJHMCConfig:
        """The kernel's static configuration for a task, prior and warm-up length."""
        default_warmup, default_moves = CHANGE_MOVE_PROBS if self.changes(task) else MOVE_PROBS
        h_init, h_final = self.h(task)
        return RJHMCConfig(
            task=task, kind=self.kind, max_depth=max_depth, alpha=alpha, beta=beta, h_init=h_init,
            h_final=h_final, schedule=self.schedule, num_warmup=int(num_warmup),
            warmup_move_probs=self.warmup_move_probs if self.warmup_move_probs is not None else default_warmup,
            move_probs=self.move_probs if self.move_probs is not None else default_moves,
            leg_steps=self.leg_steps, max_tree_depth=self.max_tree_depth, leaf_proposal=self.leaf_proposal,
            split_proposal=self.split_proposal,
            n_classes=n_classes, concentration=concentration, mu_mean=mu_mean,
        )

    def check(self, problem, where=""):
        super().check(problem, where)
        if problem.prior.min_leaf_size != 1:
            raise ValueError(f"{where}min_leaf_size is not defined for soft trees ({self.name}); leave it at 1.")
        for name in ("nu", "lam", "a"):
            if name in problem.likelihood_options:
                raise ValueError(f"{where}{name} belongs to CGM's conjugate leaf prior; {self.name} does not use it.")
        if problem.task == "regression":
            sd = float(np.std(np.asarray(problem.train_y, np.float64)))
            if not Y_SD_RANGE[0] <= sd <= Y_SD_RANGE[1]:
                warnings.warn(
                    f"{where}y has standard deviation {sd:.3g}: {self.name}'s regression priors are stated in y's "
                    f"units (leaf means N(mu_bar, 1), sigma^2 ~ InverseGamma(1.5, 1.5), as in the RJHMC-Tree paper), "
                    f"so at this scale they dominate (or vanish against) the data. Fit y / {sd:.3g} and multiply "
                    f"the predictions by {sd:.3g}, or use a method whose priors follow y's scale (method='cgm').",
                    UserWarning, stacklevel=2)

    def kernel(self, problem, chain_method, betas, num_warmup, where=""):
        prior = problem.prior
        x_min, x_range = minmax_scaler(problem.X)
        scaled = ((problem.X - x_min) / x_range).astype(np.float32)
        classification = problem.task == "classification"
        try:
            config = self.config(
                problem.task, max_depth=prior.max_depth, num_warmup=num_warmup, alpha=prior.alpha, beta=prior.beta,
                n_classes=len(problem.classes) if classification else 2,
                concentration=float(problem.likelihood.concentration) if classification else 1.0,
                mu_mean=float(problem.likelihood_options.get("mu_bar", 0.0)),
            )
        except (ValueError, TypeError) as e:
            raise ValueError(where + str(e).removeprefix("RJHMCConfig: ")) from None
        algorithm = rjhmc(config)
        if len(betas) > 1:
            # Rungs in a loop whatever the chains do: a NUTS leg's length varies from rung to rung,
            # and a vmap over rungs would make every rung wait for the longest.
            algorithm = tempering_kernel.tempered(algorithm, tuple(betas))
        data = {"X": jnp.asarray(scaled), "y": jnp.asarray(problem.train_y)}
        return Kernel(data, config, algorithm)

    def _info(self, kernel, betas, problem):
        return dict(betas=betas)

    def _fingerprint(self, kernel, betas, problem):
        return (self.name, kernel.config, tuple(betas))

    def posterior(self, traces, problem, kernel, num_warmup, info):
        from ..posterior import soft_posterior_from_traces

        x_min, x_range = minmax_scaler(problem.X)
        return soft_posterior_from_traces(
            traces, num_warmup, config=kernel.config, x_min=x_min, x_range=x_range, task=problem.task,
            classes=problem.classes, feature_names=problem.names, train_X=np.asarray(kernel.data["X"]),
            train_y=problem.train_y, method=self.name, info=info,
        )
