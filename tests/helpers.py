"""Helpers shared by the tests (``from helpers import ...``; ``tests/`` is on ``sys.path`` because
``tests/conftest.py`` lives there): the toy problem, whose every tree of depth <= 3 can be
enumerated (tests take it through the ``toy_problem`` and ``toy_data`` fixtures; module-level code
imports it), the visit frequencies of sampled trees to compare with the exact distributions of
:mod:`bdtree_jax.exact`, and the small tools of the exact checks (stacked trees, a tree's fibre,
the stationary law of an independence Metropolis-Hastings chain)."""

import collections
import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import logsumexp

from bdtree_jax.data import SplitGrid, TreeData, make_split_grid
from bdtree_jax.exact import enumerate_trees, leaf_partition, topology_string, tree_frequencies
from bdtree_jax.likelihoods import DirichletMultinomial, NormalMeanShift
from bdtree_jax.priors import TreePrior, box_sides, make_tree_data
from bdtree_jax.tree import Tree, from_string, leaf_index

# The toy data: 6 rows, 2 features, every value distinct and every gap 1 (so split_prior="range"
# equals "uniform" on them); 256 trees of depth <= 2, 3,163 of depth <= 3.
TOY_X = np.array([[1, 5], [2, 3], [3, 6], [4, 1], [5, 2], [6, 4]], float)  # (6, 2)
TOY_Y_CLASS = np.array([0, 0, 1, 1, 0, 1])  # (6,)
TOY_Y_REG = np.array([0.1, -0.3, 1.2, 1.0, 0.2, 1.4])  # (6,)
# shared by every test: read-only, so that an in-place change cannot leak into other tests
TOY_X.setflags(write=False)
TOY_Y_CLASS.setflags(write=False)
TOY_Y_REG.setflags(write=False)


@dataclasses.dataclass
class ToyProblem:
    """A small problem and its exact distributions over trees (computed on first use).

    ``X`` (n, F) and ``y`` (n,) are the data, ``grid`` the split grid of ``X`` and ``data`` the
    :class:`TreeData` the kernels take; ``boxes`` the box constraints (or None)."""

    X: np.ndarray
    y: np.ndarray
    likelihood: DirichletMultinomial | NormalMeanShift
    prior: TreePrior
    grid: SplitGrid
    data: TreeData
    boxes: list | None = None

    @functools.cached_property
    def trees(self) -> dict[str, tuple[float, float]]:
        """Every tree of the prior's support (inside the boxes), in the order of
        :func:`bdtree_jax.exact.enumerate_trees`: ``{string: (log prior, log likelihood)}``."""
        ps = self.likelihood.point_stats(self.y)
        return {s: (lp, ll) for s, lp, ll in enumerate_trees(self.X, ps, self.prior, self.likelihood, boxes=self.boxes)}

    def posterior(self, beta: float = 1.0) -> dict[str, float]:
        """The exact ``p(T) p(y | T)**beta`` normalised over :attr:`trees` (``beta`` an inverse
        temperature: 1 is the posterior, 0 the prior): ``{string: probability}``."""
        log_post = np.array([lp + beta * ll for lp, ll in self.trees.values()])
        return {s: float(p) for s, p in zip(self.trees, np.exp(log_post - logsumexp(log_post)))}

    @functools.cached_property
    def exact(self) -> dict[str, float]:
        """The exact posterior ``{string: probability}``."""
        return self.posterior(1.0)

    @functools.cached_property
    def log_z(self) -> float:
        """The log evidence ``log sum_T p(T) p(y | T)``."""
        return float(logsumexp([lp + ll for lp, ll in self.trees.values()]))


def toy_problem(task: str = "classification", max_depth: int = 2, min_leaf_size: int = 1,
                split_prior: str = "uniform", valid_cuts: str = "data", *, prior: TreePrior | None = None,
                X: np.ndarray = TOY_X, boxes: list | None = None) -> ToyProblem:
    """The toy problem: ``X`` (n, F; the toy inputs unless given: the same rows under another
    spacing), the toy labels of ``task`` ("classification": DirichletMultinomial(2, 1), or
    "regression": NormalMeanShift(nu=3, lam=0.1, a=1/3, mu_bar=mean y)), the CGM98 prior
    ``TreePrior(max_depth, alpha=0.95, beta=1.0, min_leaf_size, split_prior, valid_cuts)`` or the
    ``prior`` given instead, and optional box constraints."""
    if prior is None:
        prior = TreePrior(max_depth=max_depth, alpha=0.95, beta=1.0, min_leaf_size=min_leaf_size,
                          split_prior=split_prior, valid_cuts=valid_cuts)
    if task == "classification":
        likelihood, y = DirichletMultinomial(2, 1.0), TOY_Y_CLASS
    else:
        likelihood, y = NormalMeanShift(nu=3.0, lam=0.1, a=1 / 3, mu_bar=float(np.mean(TOY_Y_REG))), TOY_Y_REG
    grid = make_split_grid(X)
    side = None if boxes is None else box_sides(boxes, grid.thresholds)
    data = make_tree_data(grid.bin(X), y, prior, likelihood, box_side=side, grid=grid)
    return ToyProblem(X, y, likelihood, prior, grid, data, boxes)


def stack_trees(strings, thresholds: np.ndarray, max_depth: int) -> Tree:
    """Tree strings parsed on ``thresholds`` (F, C) and stacked: a Tree of (len(strings), N) arrays."""
    parsed = [from_string(s, thresholds, max_depth) for s in strings]
    return Tree(*(jnp.asarray(np.stack(a)) for a in zip(*parsed)))


def fibre(problem: ToyProblem, start: Tree) -> tuple[list[str], np.ndarray]:
    """The trees of ``problem.trees`` with the leaf partition of the rows of the tree ``start``:
    their strings (K) and log priors (K,)."""
    bins = problem.grid.bin(problem.X)
    target = leaf_partition(start, bins)
    names = [s for s in problem.trees
             if leaf_partition(from_string(s, problem.grid.thresholds, problem.prior.max_depth), bins) == target]
    return names, np.array([problem.trees[s][0] for s in names])


def chain_frequencies(traces: dict, thresholds: np.ndarray, burn: int) -> dict[str, float]:
    """Visit frequencies ``{tree string: frequency}`` of the trees of ``run_chains``'s traces
    (``traces["tree"]``: a Tree of (chains, iterations, N) arrays) after each chain's first
    ``burn`` iterations."""
    return tree_frequencies(Tree(*(a[:, burn:] for a in traces["tree"])), thresholds)


def particle_frequencies(out, thresholds: np.ndarray) -> dict[str, float]:
    """Tree -> normalised weight over SMC runs' final particles (``out.trees``: a Tree of (runs,
    particles, N) arrays, ``out.log_weight`` (runs, particles)), each run weighted equally."""
    lw = np.asarray(out.log_weight, np.float64)
    return tree_frequencies(out.trees, thresholds, weights=np.exp(lw - logsumexp(lw, axis=1, keepdims=True)))


@functools.lru_cache(maxsize=16)
def _smc_program(config, n_bins: int):
    from bdtree_jax.kernels import smc

    return jax.jit(jax.vmap(lambda k, data, threshold: smc.run(k, data, config, n_bins, threshold),
                            in_axes=(0, None, None)))


def smc_runs(data: TreeData, config, n_bins: int, n_runs: int, seed: int = 0):
    """``n_runs`` independent SMC runs (keys ``split(key(seed), n_runs)``), on the host: an
    :class:`~bdtree_jax.kernels.smc.SMCResult` of (n_runs, ...) arrays.  The data and
    ``config.ess_threshold`` are arguments of one jitted program per configuration less its
    threshold and data shapes (closing over them compiled a program per test)."""
    run = _smc_program(dataclasses.replace(config, ess_threshold=0.0), n_bins)
    keys = jax.random.split(jax.random.key(seed), n_runs)
    return jax.device_get(run(keys, data, np.float32(config.ess_threshold)))


def topology_frequencies(is_split) -> dict[str, float]:
    """Visit frequencies ``{topology string: frequency}`` of soft-tree topologies (draws, N)."""
    counts = collections.Counter(topology_string(t) for t in is_split)
    return {k: v / len(is_split) for k, v in counts.items()}


def stationary_tv(q: np.ndarray, phi: np.ndarray, target: np.ndarray) -> float:
    """TV between ``target`` (K,) and the stationary law of the Metropolis-Hastings transition
    matrix ``q(T') min(1, Φ(T') / Φ(T))`` (K, K) of the independence proposal ``q`` (K,) and log
    weights ``phi`` (K,)."""
    P = q[None, :] * np.minimum(1.0, np.exp(phi[None, :] - phi[:, None]))
    P[np.diag_indices_from(P)] += 1.0 - P.sum(1)
    evals, evecs = np.linalg.eig(P.T)
    law = np.real(evecs[:, np.argmin(np.abs(evals - 1))])
    return 0.5 * np.abs(law / law.sum() - target).sum()


@contextlib.contextmanager
def jax_listener(listener):
    """``listener`` registered as a JAX event-duration listener inside the block, removed after
    (the public ``unregister`` arrived after jax 0.7, the lowest version we support; 0.7's private
    one otherwise)."""
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield listener
    finally:
        unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
        if unregister is None:
            from jax._src import monitoring as _monitoring

            unregister = _monitoring._unregister_event_duration_listener_by_callback
        unregister(listener)


def exact_tv(traces: dict, problem: "ToyProblem", burn: int) -> float:
    """TV distance between the visit frequencies of ``run_chains``'s traces (after ``burn``) and
    the problem's exact posterior, after checking every visited tree is in the prior's support."""
    from bdtree_jax.exact import tv_distance

    freqs = chain_frequencies(traces, problem.grid.thresholds, burn)
    assert set(freqs) <= set(problem.exact), "sampler visited a tree outside the prior's support"
    return tv_distance(freqs, problem.exact)


def run_toy(algorithm, problem: "ToyProblem", num_chains: int, num_iterations: int, n_temperatures: int = 1,
            seed: int = 11) -> dict:
    """``run_chains``'s traces of ``algorithm`` on the toy ``problem`` (one block), tempered over
    ``n_temperatures`` rungs (ladder step 0.5) when more than one (the cold chain recorded)."""
    from bdtree_jax.driver import run_chains
    from bdtree_jax.kernels import tempering

    if n_temperatures > 1:
        algorithm = tempering.tempered(algorithm, tempering.ladder(n_temperatures, 0.5))
    traces, _ = run_chains(algorithm, problem.data, key=jax.random.key(seed), num_chains=num_chains,
                           num_iterations=num_iterations, block_size=num_iterations)
    return traces


def enumerated_leaves(X: np.ndarray, prior, grid) -> list[tuple[str, float, np.ndarray]]:
    """Every tree of ``prior`` on the rows ``X`` (n, F) (:func:`~bdtree_jax.exact.enumerate_trees`)
    as ``(string, log_prior, leaf)``, ``leaf`` (n,) each row's leaf under ``grid``'s thresholds: what
    an exact posterior over trees with a closed-form leaf marginal needs."""
    trees = enumerate_trees(X, np.zeros((len(X), 3)), prior, NormalMeanShift(nu=3.0, lam=1.0, a=1.0, mu_bar=0.0))
    bins = jnp.asarray(grid.bin(X))
    out = []
    for s, log_prior, _ in trees:
        t = Tree(*(jnp.asarray(a) for a in from_string(s, grid.thresholds, prior.max_depth)))
        out.append((s, log_prior, np.asarray(leaf_index(t, bins))))
    return out


def geweke_variants(prior_draw, geweke_step, stats, data, chains: int, iters: int, n_prior: int, variants: int = 1,
                    seed: int = 0, names=None):
    """Geweke's (2004) "getting it right" with planted errors in the same compiled program: per
    variant (``sbc.planted``'s index, 0 the library as it is; ``sbc.PLANT.variant`` is set while
    the step is traced) ``chains`` successive-conditional chains of ``iters`` steps
    (``geweke_step(key, state, data) -> (state, data, info)``: ``y ~ p(y | state)``, then one
    sweep) from ``prior_draw(key)`` against ``n_prior`` forward draws, the standard errors from
    the independent chains' means (a statistic constant in both: z = 0).  Returns per variant
    ``(z (S,), report)`` (``names`` (S,) label the report)."""
    from sbc import PLANT

    def chain(key, v):
        k0, k1 = jax.random.split(key)
        state = prior_draw(k0)

        def body(carry, k):
            PLANT.variant = v
            try:
                state, d, _ = geweke_step(k, *carry)
            finally:
                PLANT.variant = None
            return (state, d), stats(state)

        return jax.lax.scan(body, (state, data), jax.random.split(k1, iters))[1]

    k_chains, k_prior = jax.random.split(jax.random.key(seed))
    variant = jnp.repeat(jnp.arange(variants, dtype=jnp.int32), chains)
    sc = np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(k_chains, variants * chains), variant), np.float64)
    means = sc.mean(1).reshape(variants, chains, -1)  # (V, chains, S)
    mc = np.asarray(jax.jit(jax.vmap(lambda k: stats(prior_draw(k))))(jax.random.split(k_prior, n_prior)), np.float64)
    out = []
    for m in means:
        with np.errstate(divide="ignore", invalid="ignore"):  # a constant statistic (a fixed theta): 0 / 0
            z = (m.mean(0) - mc.mean(0)) / np.sqrt(m.var(0, ddof=1) / len(m) + mc.var(0, ddof=1) / len(mc))
        z = np.where(np.isnan(z), 0.0, z)
        labels = names if names is not None else [f"stat {i}" for i in range(len(z))]
        out.append((z, ", ".join(f"{n}: z={v:+.2f} ({a:.3f} vs {b:.3f})"
                                 for n, v, a, b in zip(labels, z, m.mean(0), mc.mean(0)))))
    return out


def check_geweke_variants(results, planted: tuple = (), bound: float = 4.0, planted_bound: float = 6.0) -> None:
    """Assert on :func:`geweke_variants`' ``results``: the library's chains (variant 0) pass, every
    ``|z| < bound``; each planted variant (named by ``planted``, in order) fails, some ``|z| >
    planted_bound``.  Prints every report."""
    (z, report), *errors = results
    print("correct", report)
    assert np.all(np.abs(z) < bound), report
    assert len(errors) == len(planted)
    for name, (z, report) in zip(planted, errors):
        print(name, report)
        assert np.max(np.abs(z)) > planted_bound, f"{name}: {report}"


def geweke_z(model, data, config, stats, chains: int, iters: int, n_prior: int, seed: int = 0,
             batches: int = 10, means: bool = False):
    """Geweke's (2004) "getting it right" z-scores of a BART-family kernel module ``model`` (its
    ``prior_draw(key, data, config)`` and ``geweke_step(key, state, data, config)``): the means of
    ``stats(state)`` (S,) over ``chains`` successive-conditional chains of ``iters`` steps from
    prior draws minus their means over ``n_prior`` forward prior draws, over batch-means standard
    errors (``batches`` per chain).  Returns (S,), or with ``means`` ``(z, chain means, prior
    means)``."""

    def chain(key):
        k0, k1 = jax.random.split(key)
        state = model.prior_draw(k0, data, config)

        def body(carry, k):
            state, d, _ = model.geweke_step(k, *carry, config)
            return (state, d), stats(state)

        return jax.lax.scan(body, (state, data), jax.random.split(k1, iters))[1]

    k_chains, k_prior = jax.random.split(jax.random.key(seed))
    sc = np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(k_chains, chains)), np.float64)
    prior = jax.jit(jax.vmap(lambda k: stats(model.prior_draw(k, data, config))))
    mc = np.asarray(prior(jax.random.split(k_prior, n_prior)), np.float64)
    b = sc.reshape(chains * batches, iters // batches, -1).mean(1)
    se = np.sqrt(b.var(0, ddof=1) / len(b) + mc.var(0, ddof=1) / len(mc))
    z = (sc.mean((0, 1)) - mc.mean(0)) / se
    return (z, sc.mean((0, 1)), mc.mean(0)) if means else z
