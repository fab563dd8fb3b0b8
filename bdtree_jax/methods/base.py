"""What every method shares: the run options, tempering, and the base classes.

A method is a frozen dataclass of its own options, validated when it is made.  Given a
:class:`~bdtree_jax.problem.TreeProblem` (built once per fit), :meth:`Method.run` checks that the
problem's prior suits the method, builds the method's kernel, runs it through the driver
(:mod:`bdtree_jax.driver`) and returns a posterior.  MCMC methods (:class:`MCMCMethod`) build a
:class:`~bdtree_jax.kernels.base.SamplingAlgorithm` and share the whole run; adding a method is one
new class.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._renamed import CHAIN_METHODS_RENAMED, accepts_renamed, renamed_value
from .._checkpoint import checkpoint_ident, run_ident
from ..driver import BLOCK_SIZE, CHAIN_METHODS, check_rows, plan_chains, run_chains
from ..features import check_supported
from ..kernels import tempering as tempering_kernel
from ..problem import TreeProblem
from ._memory import check_run
from .until import Converged, round_thins, run_rounds
from .._validate import is_int

__all__ = ["RunOptions", "Tempering", "Method", "MCMCMethod", "Kernel", "check_integer", "check_seed",
           "check_checkpoint", "with_tempering", "independent_stats"]


def check_integer(name: str, value, low: int) -> None:
    """``value`` is an integer (not a bool) >= ``low``, else a ``ValueError`` naming ``name``."""
    if not is_int(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {value!r}.")


def check_seed(seed) -> None:
    """``seed`` is an integer (not a bool) that ``jax.random.key`` takes (a signed 64-bit
    integer), else a ``ValueError``."""
    if not is_int(seed) or not -2**63 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [-2**63, 2**63); got {seed!r}.")


def check_checkpoint(checkpoint) -> None:
    """``checkpoint`` is None or a file path (str or os.PathLike), else a ``ValueError``."""
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise ValueError(f"checkpoint must be None or a file path (str or os.PathLike); got {checkpoint!r}.")


@dataclass(frozen=True)
class RunOptions:
    """How long and where a method runs (the driver's options, not a method's).

    Parameters
    ----------
    num_warmup : int >= 0, default 1000
        Iterations per chain discarded (MCMC methods; SMC and PCFG need none and ignore it).
    num_samples : int, default 1000
        Draws kept per chain (>= 1; >= 0 for SMC and PCFG).
    num_chains : int >= 1, default 4
        Independent chains (SMC: independent runs; PCFG: independent sets of exact draws).
    seed : int, default 0
        Chain ``c`` uses the key ``fold_in(key(seed), c)``: the same seed and options give the same
        draws whatever the number of chains, devices or the block size.
    progress : bool or None, default None
        Show a tqdm progress bar (None: when stderr is a terminal).
    checkpoint : str, path or None
        A checkpoint file: written as the run goes, and an interrupted run given the same file
        resumes from it with the same result.
    block_size : int >= 1 or None
        Iterations per compiled block (and between checkpoints); None: the method's default
        (:data:`~bdtree_jax.driver.CGM_BLOCK_SIZE` for CGM, whose steps take microseconds, else
        :data:`~bdtree_jax.driver.BLOCK_SIZE`).
    devices : sequence of JAX devices or None
        Devices to spread the chains over (default: all; :func:`~bdtree_jax.driver.chain_devices`).
    chain_method : "loop", "vmap" or None
        How the chains of one device run: one after another in one compiled program
        (``lax.map``; the default on CPU) or batched (``vmap``; the default on accelerators).  The
        chains are spread over ``devices`` either way, so there is no NumPyro ``"parallel"``;
        NumPyro's ``"sequential"`` and ``"vectorized"`` (this option's earlier names, still taken
        with a ``DeprecationWarning``) run every chain on one device.  Decided once per run
        (:func:`~bdtree_jax.driver.plan_chains`); the kernels are built for it.
    data_shards : int >= 1, default 1
        Split every chain's training rows over this many devices (MCMC methods), so one chain's
        data can exceed one device: the devices (``devices``, default all, across processes
        under ``jax.distributed``) form groups of ``data_shards`` and the chains are spread over
        the groups (:func:`~bdtree_jax.driver.plan_chains`).  It must divide the number of
        devices and the number of training rows (rows are not padded); otherwise, or for a
        method that does not run chains (SMC, PCFG), a ``ValueError`` before anything compiles.
        The trees are those of the unsharded run and floats agree to float32 round-off (sums over
        rows are added in another order; docs/chains-devices.md).
    thin : int >= 1, default 1
        Keep every ``thin``-th iteration after warm-up (MCMC methods): ``num_samples`` draws
        from ``num_warmup + num_samples * thin`` iterations, the iterations
        ``num_warmup + thin - 1, num_warmup + 2 thin - 1, ...`` (the others are never recorded,
        so the traces take ``thin`` times less memory).  Warm-up iterations are all recorded.
    run_until : Converged or None, default None
        Keep sampling (MCMC methods) until the convergence check passes or a budget ends
        (:class:`~bdtree_jax.methods.until.Converged`: rounds that double ``thin``, the memory of
        ``num_samples`` draws); None: the fixed ``num_warmup + num_samples * thin`` iterations.
    """

    num_warmup: int = 1000
    num_samples: int = 1000
    num_chains: int = 4
    seed: int = 0
    progress: bool | None = None
    checkpoint: str | os.PathLike | None = None
    block_size: int | None = None
    devices: tuple | None = None
    chain_method: str | None = None
    data_shards: int = 1
    thin: int = 1
    run_until: Converged | None = None

    def __post_init__(self):
        for name, low in (("num_warmup", 0), ("num_samples", 0), ("num_chains", 1), ("data_shards", 1), ("thin", 1)):
            check_integer(name, getattr(self, name), low)
        if self.block_size is not None:
            check_integer("block_size", self.block_size, 1)
        check_seed(self.seed)
        check_checkpoint(self.checkpoint)
        object.__setattr__(self, "chain_method", renamed_value("chain_method", self.chain_method,
                                                               CHAIN_METHODS_RENAMED, stacklevel=3))
        if self.chain_method is not None and self.chain_method not in CHAIN_METHODS:
            raise ValueError(f"chain_method must be one of {CHAIN_METHODS} or None; got {self.chain_method!r}.")
        if self.devices is not None:
            object.__setattr__(self, "devices", tuple(self.devices))
        if self.run_until is not None and not isinstance(self.run_until, Converged):
            raise ValueError(f"run_until must be a bd.Converged or None; got {self.run_until!r}.")


@accepts_renamed("n_temperatures")
@dataclass(frozen=True)
class Tempering:
    """Metropolis-coupled MCMC (:mod:`~bdtree_jax.kernels.tempering`) for the methods that
    support it (CGM, RJHMC, PG, WU).

    Parameters
    ----------
    num_temperatures : int >= 1, default 1
        Rungs of the ladder; 1 turns tempering off.
    delta_t : float > 0, default 0.2
        Rung ``i`` has the inverse temperature ``1 / (1 + delta_t * i)`` (MrBayes' ladder) and
        targets prior x likelihood**beta; a swap between two random rungs is proposed after every
        iteration and only the cold rung (beta = 1) is recorded.
    """

    num_temperatures: int = 1
    delta_t: float = 0.2

    def __post_init__(self):
        check_integer("num_temperatures", self.num_temperatures, 1)
        tempering_kernel.ladder(self.num_temperatures, self.delta_t)  # validates delta_t

    @property
    def betas(self) -> tuple:
        """The inverse temperatures, ``(num_temperatures,)`` floats, the first 1."""
        return tempering_kernel.ladder(self.num_temperatures, self.delta_t)


class Kernel(NamedTuple):
    """A method's kernel for one problem and run: what the driver steps and records.

    data : the pytree of arrays every step reads.
    config : the static configuration (its ``repr`` goes into the run's info and checkpoints).
    algorithm : the :class:`~bdtree_jax.kernels.base.SamplingAlgorithm`.
    """

    data: Any
    config: Any
    algorithm: Any


def with_tempering(algorithm, betas: tuple, chain_method: str):
    """``algorithm`` over the ladder ``betas`` (itself for one rung), its rungs ``vmap``-ped when
    the chains are (``chain_method="vmap"``) and looped otherwise: the one place a kernel
    reads how chains share a device."""
    if len(betas) == 1:
        return algorithm
    return tempering_kernel.tempered(algorithm, tuple(betas), vectorized=chain_method == "vmap")


@dataclass(frozen=True)
class Method:
    """Base of the methods.  Subclasses are frozen dataclasses of their options and define
    :attr:`name` and :meth:`run`."""

    #: the method's name (``method=`` as a string).
    name: ClassVar[str] = ""
    #: supports :class:`Tempering`.
    tempers: ClassVar[bool] = False
    #: the fewest ``num_samples`` a run takes.
    min_samples: ClassVar[int] = 1
    #: the iterations per compiled block when :attr:`RunOptions.block_size` is None.
    default_block_size: ClassVar[int] = BLOCK_SIZE
    #: the tree-structure priors (``TreePrior.structure``) the method samples.
    structures: ClassVar[tuple] = ("cgm",)
    #: the method has a tree prior of its own (RJHMC, PCFG): CGM98's rule options do not apply.
    own_prior: ClassVar[bool] = False
    #: runs Markov chains through :func:`~bdtree_jax.driver.run_chains` (``thin`` and
    #: ``data_shards`` apply).
    runs_chains: ClassVar[bool] = False

    def options(self) -> dict:
        """The method's options, ``{field: value}``."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def problem_options(self) -> dict:
        """The keyword arguments of :func:`~bdtree_jax.problem.build_problem` the method sets
        (CGM: its ``box_constraints``)."""
        return {}

    def check(self, problem: TreeProblem, where: str = "") -> None:
        """Raise a ``ValueError`` if the problem's data or prior is one the method does not sample
        (categorical features and missing cells: :data:`~bdtree_jax.features.SUPPORTS_CATEGORICAL`)."""
        check_supported(self.name, problem.grid.levels, problem.X, problem.names, where)
        prior = problem.prior
        if prior.structure not in self.structures:
            raise ValueError(
                f"{where}structure={prior.structure!r} is supported by method='cgm' (proposal 'cgm' or "
                f"'cgm+perturb') and method='wu'; method={self.name!r} " + (
                    "has its own prior." if self.own_prior else
                    "draws trees or rules from the CGM98 prior's generative process."))
        if prior.valid_cuts != "data":
            if not self._ancestors_supported():
                raise ValueError(
                    f"{where}valid_cuts='ancestors' is supported by method='cgm' with proposal='cgm' and by "
                    f"method='pg' with proposal='prior'; got method={self.name!r}, "
                    f"proposal={getattr(self, 'proposal', None)!r}.")
            for name, used in (("structure", prior.structure != "cgm"),
                               ("box_constraints", problem.box_constraints is not None),
                               ("initial_tree", getattr(self, "initial_tree", None) is not None)):
                if used:
                    raise ValueError(f"{where}valid_cuts='ancestors' does not support {name} (only structure='cgm', "
                                     "without box constraints or an initial tree).")
        if self.own_prior and prior.split_prior != "uniform":
            raise ValueError(
                f"{where}split_prior is an option of the CGM98 tree prior (methods 'cgm', 'wu', 'smc', 'pg'); "
                f"method={self.name!r} has its own prior and does not use it.")

    def _ancestors_supported(self) -> bool:
        return False

    def _start(self, problem: TreeProblem, options: RunOptions | None, tempering: Tempering | None,
               where: str) -> tuple[RunOptions, tuple]:
        """Check the problem and the run's options for this method; returns the options and the
        ladder of inverse temperatures."""
        options = RunOptions() if options is None else options
        if options.num_samples < self.min_samples:
            raise ValueError(f"{where}num_samples must be an integer >= {self.min_samples}; got "
                             f"{options.num_samples!r}.")
        if options.run_until is not None and not self.runs_chains:
            raise ValueError(f"{where}run_until applies to the MCMC methods ('cgm', 'hmc-df', 'hmc-dfi', 'pg', 'wu'); "
                             f"method={self.name!r} draws independent runs; leave run_until=None.")
        for name in ("thin", "data_shards"):
            if getattr(options, name) != 1 and not self.runs_chains:
                raise ValueError(f"{where}{name} applies to the MCMC methods ('cgm', 'hmc-df', 'hmc-dfi', 'pg', 'wu'); "
                                 f"method={self.name!r} draws independent runs; leave {name}=1.")
        tempering = Tempering() if tempering is None else tempering
        if not isinstance(tempering, Tempering):
            raise ValueError(f"{where}tempering must be a bd.Tempering or None; got {tempering!r}.")
        if tempering.num_temperatures > 1 and not self.tempers:
            raise ValueError(f"{where}tempering applies to MCMC methods ('cgm', 'hmc-df', 'hmc-dfi', 'pg', 'wu'); "
                             f"method={self.name!r} does not use it.")
        self.check(problem, where)
        check_run(self, problem, options, len(tempering.betas), where)
        return options, tempering.betas

    def run(self, problem: TreeProblem, options: RunOptions | None = None, tempering: Tempering | None = None, *,
            where: str = ""):
        """Sample the posterior of ``problem``.

        Parameters
        ----------
        problem : TreeProblem from :func:`~bdtree_jax.problem.build_problem`.
        options : RunOptions or None (the defaults).
        tempering : Tempering or None (no tempering).
        where : prefix of error messages.

        Returns
        -------
        Posterior (or the method's subclass of it).
        """
        raise NotImplementedError


def independent_stats(trees, log_lik: np.ndarray, log_prior: np.ndarray, n_leaves: np.ndarray | None = None):
    """The per-draw statistics of independent draws (SMC, PCFG), as an MCMC posterior records them.

    Parameters
    ----------
    trees : Tree or MixedTree of (C, S, N, ...) arrays.
    log_lik, log_prior : (C, S) arrays.
    n_leaves : (C, S) ints, or None to count them.

    Returns
    -------
    stats : dict of (C, S) arrays: ``log_lik``, ``log_prior`` (float32), ``n_leaves``, ``depth``
        (int32), ``accepted`` (all True), ``move`` (0) and ``log_posterior``.
    warmup_stats : the same keys with no iterations, (C, 0).
    """
    from ..tree import tree_summaries

    shape = log_lik.shape
    counted, depth = (np.asarray(a) for a in tree_summaries(jnp.asarray(trees.is_split)))
    n_leaves = counted if n_leaves is None else np.asarray(n_leaves)
    stats = dict(log_lik=log_lik.astype(np.float32), log_prior=log_prior.astype(np.float32),
                 n_leaves=n_leaves.astype(np.int32), depth=depth.astype(np.int32), accepted=np.ones(shape, bool),
                 move=np.zeros(shape, np.int32))
    stats["log_posterior"] = stats["log_lik"] + stats["log_prior"]
    return stats, {k: v[:, :0] for k, v in stats.items()}


@dataclass(frozen=True)
class MCMCMethod(Method):
    """A method whose chains run through :func:`~bdtree_jax.driver.run_chains`: it builds a
    :class:`Kernel` and turns the traces into a posterior."""

    tempers: ClassVar[bool] = True
    runs_chains: ClassVar[bool] = True

    def kernel(self, problem: TreeProblem, chain_method: str, betas: tuple, num_warmup: int, where: str = "") -> Kernel:
        """The kernel for ``problem``, built for how the chains share a device (``chain_method``)
        and the tempering ladder ``betas``."""
        raise NotImplementedError

    def posterior(self, traces: dict, problem: TreeProblem, kernel: Kernel, num_warmup: int, info: dict):
        """The posterior of the driver's traces (hard trees; RJHMC overrides)."""
        from ..posterior import posterior_from_traces

        return posterior_from_traces(traces, num_warmup, method=self.name, info=info, **problem.posterior_fields())

    def _info(self, kernel: Kernel, betas: tuple, problem: TreeProblem) -> dict:
        """Run metadata beyond the seed, lengths, timing and config."""
        return dict(proposal=getattr(self, "proposal", "cgm"), betas=betas, box_constraints=None, edit=None)

    def _fingerprint(self, kernel: Kernel, betas: tuple, problem: TreeProblem):
        return (self.name, kernel.config, problem.prior)

    def run(self, problem, options=None, tempering=None, *, where=""):
        options, betas = self._start(problem, options, tempering, where)
        try:
            plan = plan_chains(options.num_chains, options.devices, options.chain_method, options.data_shards)
            if plan.data_shards > 1:
                check_rows(problem.data, plan.data_shards)
        except ValueError as e:
            raise ValueError(where + str(e)) from None
        kernel = self.kernel(problem, plan.chain_method, betas, options.num_warmup, where)
        block_size = self.default_block_size if options.block_size is None else options.block_size
        key, fingerprint = jax.random.key(options.seed), self._fingerprint(kernel, betas, problem)
        t0 = time.perf_counter()

        def run_for(thin, resume=None):
            return run_chains(
                kernel.algorithm, kernel.data, key=key, num_chains=options.num_chains,
                num_iterations=options.num_warmup + options.num_samples * thin, block_size=block_size,
                progress=options.progress, checkpoint=options.checkpoint, fingerprint=fingerprint,
                description=self.name, plan=plan, num_warmup=options.num_warmup, thin=thin, resume=resume,
            )

        def posterior_of(traces, thin, **extra):
            info = dict(seed=options.seed, num_warmup=options.num_warmup, num_samples=options.num_samples,
                        seconds=time.perf_counter() - t0, config=repr(kernel.config),
                        **self._info(kernel, betas, problem), **extra)
            if thin != 1 or plan.data_shards != 1:
                info.update(thin=thin, data_shards=plan.data_shards)
            return self.posterior(traces, problem, kernel, options.num_warmup, info)

        if options.run_until is None:
            return posterior_of(run_for(options.thin)[0], options.thin)
        return self._run_until(options, plan, key, fingerprint, kernel, run_for, posterior_of)

    def _run_until(self, options, plan, key, fingerprint, kernel, run_for, posterior_of):
        """``run_until``'s rounds (:func:`~bdtree_jax.methods.until.run_rounds`); the posterior's
        ``info["run_until"]`` reports them."""
        from ..diagnostics import convergence_diagnostics

        until = options.run_until
        thins = round_thins(options.thin, options.num_samples, until.max_iterations)
        saved = checkpoint_ident(options.checkpoint)
        key_data = jax.random.key_data(key)
        first = next((r for r, thin in enumerate(thins) if saved is not None and saved == run_ident(
            fingerprint, key_data, options.num_chains, options.num_warmup + options.num_samples * thin, kernel.data,
            options.num_warmup, thin, plan.data_shards)), 0)

        def diagnose(traces, thin):
            posterior = posterior_of(traces, thin)
            return posterior, convergence_diagnostics(posterior)

        posterior, report = run_rounds(until, options.thin, options.num_warmup, options.num_samples, run_for,
                                       diagnose, first_round=first)
        posterior.info["run_until"] = report
        return posterior
