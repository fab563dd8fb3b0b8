"""The result of a run: every draw's tree plus diagnostics, predictions and ArviZ export."""

from __future__ import annotations

import collections
import functools
import pickle
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..data import SplitGrid, check_X
from ..likelihoods import DirichletMultinomial
from ..priors import TreePrior
from ..tree import Tree, distinct_trees, leaf_index, leaf_nodes, over_draws, plot_tree, to_string, tree_text

__all__ = ["Posterior", "PCFGPosterior", "SMCPosterior", "posterior_from_traces"]

_SCALARS = ("log_lik", "log_prior", "n_leaves", "depth", "accepted", "move")


def _leaf_stats(tree: Tree, train_bins, point_stats):
    """Leaf of every training row (n,) and the summed statistics of every node's rows (N, S)."""
    leaf = leaf_index(tree, train_bins)
    return leaf, jax.ops.segment_sum(point_stats, leaf, num_segments=tree.is_split.shape[-1])


def _sample_leaf_params(key, tree: Tree, stats, likelihood):
    """Leaf parameters (N, P) drawn from their conditional posterior given the tree (class
    probabilities; or leaf means given sigma^2, itself drawn from its marginal posterior) and
    sigma^2 (NaN for classification).  Uses the first and third of ``split(key, 3)``; the second
    is left to the caller's noise."""
    k1, _, k3 = jax.random.split(key, 3)
    if isinstance(likelihood, DirichletMultinomial):
        return likelihood.sample_leaf(k1, stats), jnp.float32(jnp.nan)
    sigma2 = likelihood.posterior_sigma2(k3, stats, leaf_nodes(tree))
    return likelihood.sample_leaf(k1, stats, sigma2), sigma2


@jax.jit
def _draw_leaf_params(trees: Tree, train_bins, point_stats, test_bins, likelihood):
    """Posterior-mean leaf parameter at each test row, per draw: (draws, n_test, P)."""

    def one(tree):
        _, stats = _leaf_stats(tree, train_bins, point_stats)
        return likelihood.leaf_mean(stats)[leaf_index(tree, test_bins)]

    return jax.vmap(one)(trees)


@functools.partial(jax.jit, static_argnames=("predictive",))
def _draw_function(keys, trees: Tree, train_bins, point_stats, test_bins, likelihood, predictive=False):
    """Per draw, leaf parameters drawn from their conditional posterior, evaluated at the test rows:
    (draws, n_test, P) class probabilities or regression function values (plus noise when
    ``predictive``)."""

    def one(key, tree):
        _, stats = _leaf_stats(tree, train_bins, point_stats)
        params, sigma2 = _sample_leaf_params(key, tree, stats, likelihood)
        mu = params[leaf_index(tree, test_bins)]
        if predictive:
            mu = mu + jnp.sqrt(sigma2) * jax.random.normal(jax.random.split(key, 3)[1], mu.shape)
        return mu

    return jax.vmap(one)(keys, trees)


@jax.jit
def _draw_pointwise(keys, trees: Tree, train_bins, point_stats, likelihood, codes):
    """Per draw: leaf parameters drawn from their conditional posterior, the pointwise
    log-likelihood of every training row and a replicated response.  Shapes (draws, n)."""

    def one(key, tree):
        leaf, stats = _leaf_stats(tree, train_bins, point_stats)
        params, sigma2 = _sample_leaf_params(key, tree, stats, likelihood)
        k_rep = jax.random.split(key, 3)[1]
        if isinstance(likelihood, DirichletMultinomial):
            probs = params[leaf]  # (n, K)
            loglik = likelihood.point_log_lik(probs, codes)
            rep = jax.random.categorical(k_rep, jnp.log(probs))
            return loglik, rep.astype(jnp.float32), sigma2
        mu = params[leaf, 0]
        loglik = -0.5 * (jnp.log(2 * jnp.pi * sigma2) + (codes - mu) ** 2 / sigma2)
        rep = mu + jnp.sqrt(sigma2) * jax.random.normal(k_rep, mu.shape)
        return loglik, rep, jnp.sqrt(sigma2)

    return jax.vmap(one)(keys, trees)


@dataclass(eq=False, kw_only=True)
class _DrawSummaries:
    """What every posterior of draws holds (the fields below, given by keyword) and offers once a
    subclass adds ``predict_draws``, ``sample_function``, ``num_chains`` and ``num_draws``."""

    stats: dict
    """(C, S) arrays per diagnostic: ``log_lik``, ``log_prior``, ``log_posterior`` (their sum,
    unnormalised), ``n_leaves``, ``depth``, ``accepted``, ``move`` and the method's own."""
    warmup_stats: dict
    """The same for the warm-up (burn-in) iterations, (C, W)."""
    task: str
    """"classification" or "regression"."""
    classes: np.ndarray | None
    """(K,) class labels (classification) or None."""
    feature_names: list
    """The features' names, (F,) str."""
    train_y: np.ndarray
    """(n,) the encoded training response (class codes or real values)."""
    method: str = "cgm"
    """Name of the method that drew the posterior."""
    info: dict = field(default_factory=dict)
    """Free-form run metadata (seed, timings, ...)."""

    def predict_proba(self, X) -> np.ndarray:
        """(n, K) posterior-averaged class probabilities (classification)."""
        self._require("classification", "predict_proba")
        return self.predict_draws(X).mean(0, dtype=np.float64)

    def predict(self, X) -> np.ndarray:
        """Posterior-averaged prediction: class labels (classification) or means (regression)."""
        mean = self.predict_draws(X).mean(0, dtype=np.float64)
        if self.task == "classification":
            return self.classes[np.argmax(mean, axis=1)]
        return mean[:, 0]

    def predict_interval(self, X, prob: float = 0.9, *, predictive: bool = False, seed: int = 0):
        """Equal-tailed posterior interval at each row of X (see ``sample_function``).

        Returns ``(lower, upper)``: (n,) for regression — a credible interval of the regression
        function, or with ``predictive=True`` a prediction interval for a new response — and
        (n, K) for class probabilities.
        """
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1); got {prob}.")
        if predictive and self.task != "regression":
            raise ValueError("predictive intervals are for regression; use predict_proba for classes.")
        draws = self.sample_function(X, predictive=predictive, seed=seed).astype(np.float64)
        lo, hi = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        if self.task == "regression":
            return lo[:, 0], hi[:, 0]
        return lo, hi

    def _require(self, task: str, what: str) -> None:
        if self.task != task:
            raise ValueError(f"{what} is only available for {task} posteriors (this one is {self.task}).")

    def acceptance_rate(self) -> float:
        return float(np.mean(self.stats["accepted"]))

    def swap_rates(self, *, include_warmup: bool = True) -> np.ndarray:
        """Tempered runs: (R, R) acceptance rate of the swaps proposed between rungs ``i < j``
        (rung 0 is the cold chain; NaN where never proposed)."""
        if "swap_pair" not in self.stats:
            raise ValueError("swap_rates needs a tempered run (n_temperatures > 1).")
        from ..diagnostics import swap_rates

        pair, acc = self.stats["swap_pair"], self.stats["swap_accepted"]
        if include_warmup and "swap_pair" in self.warmup_stats:
            pair = np.concatenate([self.warmup_stats["swap_pair"], pair], axis=1)
            acc = np.concatenate([self.warmup_stats["swap_accepted"], acc], axis=1)
        return swap_rates(pair, acc, len(self.info.get("betas", ())) or int(np.sqrt(pair.max() + 1)) + 1)

    def summary(self) -> dict:
        """Scalar summaries: mean leaves, depth, acceptance, distinct trees visited."""
        return dict(
            num_chains=self.num_chains,
            num_draws=self.num_draws,
            mean_leaves=float(np.mean(self.stats["n_leaves"])),
            mean_depth=float(np.mean(self.stats["depth"])),
            acceptance_rate=self.acceptance_rate(),
            **self._extra_summary(),
        )


@dataclass(eq=False)
class Posterior(_DrawSummaries):
    """Draws of a tree sampler (arrays are numpy, leading axes ``(chain, draw)``); the fields
    shared by every posterior (``stats``, ``warmup_stats``, ``task``, ``classes``,
    ``feature_names``, ``train_y``, ``method``, ``info``) are described on the base class, the
    hard tree's own below."""

    trees: Tree
    """Tree of (C, S, N) arrays."""
    grid: SplitGrid
    """The training data's split grid (thresholds of every cut)."""
    likelihood: Any
    """The leaf model (:class:`~bdtree_jax.likelihoods.DirichletMultinomial` or
    :class:`~bdtree_jax.likelihoods.NormalMeanShift`)."""
    prior: TreePrior
    """The tree prior."""
    train_bins: np.ndarray
    """(n, F) int32 training bins the leaf parameters are conditioned on."""
    train_stats: np.ndarray
    """(n, S) float32 training sufficient statistics per row."""

    # -- shape -------------------------------------------------------------------------------
    @property
    def num_chains(self) -> int:
        return self.trees.is_split.shape[0]

    @property
    def num_draws(self) -> int:
        return self.trees.is_split.shape[1]

    def _flat_trees(self) -> Tree:
        return Tree(*(np.asarray(a).reshape(-1, a.shape[-1]) for a in self.trees))

    def tree(self, chain: int, draw: int) -> Tree:
        """One draw's tree (numpy arrays)."""
        return Tree(*(np.asarray(a[chain, draw]) for a in self.trees))

    # -- trees as text -------------------------------------------------------------------------
    @functools.cached_property
    def _strings(self) -> list[str]:
        flat = self._flat_trees()
        first, inverse, _ = distinct_trees(flat)
        names = [to_string(Tree(*(np.asarray(a)[i] for a in flat)), self.grid.thresholds) for i in first]
        return [names[k] for k in inverse]

    def tree_strings(self) -> list[str]:
        """One :func:`~bdtree_jax.tree.to_string` string per draw, chains concatenated."""
        return list(self._strings)

    def tree_frequencies(self) -> dict[str, float]:
        """Visit frequency of every distinct tree, most frequent first."""
        counts = collections.Counter(self._strings)
        total = sum(counts.values())
        return {k: v / total for k, v in counts.most_common()}

    def map_tree(self) -> Tree:
        """The visited tree with the highest (unnormalised) log posterior."""
        lp = np.asarray(self.stats["log_posterior"])
        c, d = np.unravel_index(np.argmax(lp), lp.shape)
        return self.tree(int(c), int(d))

    def most_visited_tree(self) -> tuple[str, float]:
        """The most frequent tree string and its frequency."""
        return next(iter(self.tree_frequencies().items()))

    def tree_text(self, tree: Tree | None = None) -> str:
        """Indented text of ``tree`` (default: the MAP tree) with feature names and leaf values."""
        tree = self.map_tree() if tree is None else tree
        return tree_text(tree, self.grid.thresholds, self.feature_names, self._leaf_labels(tree))

    def plot_tree(self, tree: Tree | None = None, ax=None):
        """Matplotlib drawing of ``tree`` (default: the MAP tree)."""
        tree = self.map_tree() if tree is None else tree
        return plot_tree(tree, self.grid.thresholds, self.feature_names, self._leaf_labels(tree), ax=ax)

    def _leaf_labels(self, tree: Tree) -> list[str]:
        n = tree.is_split.shape[-1]
        stats = np.asarray(
            jax.ops.segment_sum(
                jnp.asarray(self.train_stats), leaf_index(Tree(*map(jnp.asarray, tree)), jnp.asarray(self.train_bins)), n
            )
        )
        means = np.asarray(self.likelihood.leaf_mean(jnp.asarray(stats)))
        labels = []
        for i in range(n):
            if self.task == "classification":
                k = int(np.argmax(means[i]))
                labels.append(f"{self.classes[k]} (p={means[i, k]:.2f}, n={int(stats[i].sum())})")
            else:
                labels.append(f"{means[i, 0]:.4g} (n={int(stats[i, 0])})")
        return labels

    # -- prediction ----------------------------------------------------------------------------
    def _bins(self, X) -> np.ndarray:
        X, names = check_X(X, name="X")
        if X.shape[1] != self.grid.n_features:
            raise ValueError(f"X has {X.shape[1]} features but the posterior was fitted with {self.grid.n_features}.")
        if names is not None and self.feature_names and names != list(self.feature_names):
            raise ValueError(f"X has feature names {names} but the posterior was fitted with {list(self.feature_names)}.")
        return self.grid.bin(X)

    def predict_draws(self, X, *, max_draws: int | None = None, chunk: int = 256) -> np.ndarray:
        """Per-draw posterior-mean leaf parameter at each row of X.

        Returns
        -------
        (draws, n, P) float32: class probabilities (P = K) or leaf means (P = 1); draws are all
        chains' draws concatenated (thinned evenly to at most ``max_draws``).
        """
        test_bins = jnp.asarray(self._bins(X))
        flat = self._flat_trees()
        total = flat.is_split.shape[0]
        idx = np.arange(total)
        if max_draws is not None and total > max_draws:
            idx = np.linspace(0, total - 1, max_draws).round().astype(int)
        train_bins, train_stats = jnp.asarray(self.train_bins), jnp.asarray(self.train_stats)
        return over_draws(
            lambda _, trees: _draw_leaf_params(trees, train_bins, train_stats, test_bins, self.likelihood),
            flat, idx, chunk,
        )

    def _mean_prediction(self, X, chunk: int = 256) -> np.ndarray:
        """(n, P) float64 average of :meth:`predict_draws` over all draws, evaluating every
        *distinct* tree once and weighting it by its visits (long MH runs revisit few trees many
        times), so memory is ``chunk x n x P`` whatever the number of draws."""
        test_bins = jnp.asarray(self._bins(X))
        flat = [np.asarray(a) for a in self._flat_trees()]
        first, _, counts = distinct_trees(flat)
        train_bins, train_stats = jnp.asarray(self.train_bins), jnp.asarray(self.train_stats)
        weights = counts / counts.sum()
        out = 0.0
        for s in range(0, len(first), chunk):
            sel = np.arange(s, min(s + chunk, len(first)))
            params = over_draws(
                lambda _, trees: _draw_leaf_params(trees, train_bins, train_stats, test_bins, self.likelihood),
                Tree(*flat), first[sel], chunk,
            )
            out = out + np.tensordot(weights[sel], params.astype(np.float64), axes=1)
        return out

    def predict_proba(self, X) -> np.ndarray:
        """(n, K) posterior-averaged class probabilities (classification), float64."""
        self._require("classification", "predict_proba")
        return self._mean_prediction(X)

    def predict(self, X) -> np.ndarray:
        """Posterior-averaged prediction: class labels (classification) or means (regression)."""
        mean = self._mean_prediction(X)
        if self.task == "classification":
            return self.classes[np.argmax(mean, axis=1)]
        return mean[:, 0]

    def sample_function(self, X, *, predictive: bool = False, seed: int = 0, chunk: int = 256) -> np.ndarray:
        """Posterior draws of the function at X, leaf parameters included.

        For every kept draw of the tree, the leaf parameters are drawn from their conditional
        posterior given the tree and the training data (Dirichlet for class probabilities; for
        regression sigma^2 from its inverse-gamma and the leaf means given sigma^2), so the draws
        carry both tree and leaf uncertainty.  ``predictive=True`` (regression) adds the noise,
        giving draws of a new response.

        Returns
        -------
        (draws, n, P) float32 (P = K class probabilities, or 1).
        """
        test_bins = jnp.asarray(self._bins(X))
        flat = self._flat_trees()
        total = flat.is_split.shape[0]
        keys = jax.random.split(jax.random.key(seed), total)
        train_bins, train_stats = jnp.asarray(self.train_bins), jnp.asarray(self.train_stats)
        return over_draws(
            lambda draws, trees: _draw_function(
                keys[draws], trees, train_bins, train_stats, test_bins, self.likelihood, predictive=predictive
            ),
            flat, np.arange(total), chunk,
        )

    def _extra_summary(self) -> dict:
        return dict(distinct_trees=len(set(self._strings)))

    # -- ArviZ -----------------------------------------------------------------------------------
    def to_arviz(self, *, pointwise: bool = True, seed: int = 0, max_draws_pointwise: int | None = None):
        """An ArviZ ``InferenceData`` (ArviZ 0.2x) or ``DataTree`` (ArviZ 1.x).

        Groups: ``posterior`` (``n_leaves``, ``depth``, and ``sigma`` for regression: a draw of the
        noise sd from its conditional posterior), ``sample_stats`` (``lp``, ``log_marginal_likelihood``,
        ``log_prior``, ``accepted``, ``move``), and with ``pointwise=True`` ``log_likelihood``
        (``y``: log p(y_i | leaf parameters) with the leaf parameters of every draw drawn from their
        conditional posterior, for LOO/WAIC), ``posterior_predictive`` (``y``: a replicated
        response per draw) and ``observed_data`` (``y``: the training response, class codes
        ``0..K-1`` for classification).  The pointwise variables have dimension ``obs``.

        Parameters
        ----------
        pointwise : bool
            Add the ``log_likelihood``, ``posterior_predictive`` and ``observed_data`` groups
            (and ``sigma``), which cost one pass over the training rows per draw.
        seed : int
            Seed of the leaf-parameter, ``sigma`` and replicated-response draws.
        max_draws_pointwise : int, optional
            With ``pointwise=True``, keep at most this many draws (at least one per chain) by
            taking every k-th draw of each chain; every group is thinned the same way so that
            the groups stay aligned on ``(chain, draw)``.
        """
        from .._arviz import make_inference_data

        C, S = self.num_chains, self.num_draws
        keep = np.arange(S)
        if pointwise and max_draws_pointwise is not None:
            if int(max_draws_pointwise) < C:
                raise ValueError(
                    f"max_draws_pointwise must be >= num_chains ({C}); got {max_draws_pointwise!r}."
                )
            per_chain = int(max_draws_pointwise) // C
            keep = keep[:: -(-S // per_chain)]
        S = len(keep)

        def kept(name):
            return np.asarray(self.stats[name])[:, keep]

        posterior = {"n_leaves": kept("n_leaves"), "depth": kept("depth")}
        sample_stats = {
            "lp": kept("log_posterior"),
            "log_marginal_likelihood": kept("log_lik"),
            "log_prior": kept("log_prior"),
            "accepted": kept("accepted"),
            "move": kept("move"),
            # kernel extras (tempering swaps, regrow, PG's chosen particle and stages, ...)
            **{k: kept(k) for k in self.stats if k not in _SCALARS and k != "log_posterior"},
        }
        groups = {"posterior": posterior, "sample_stats": sample_stats}
        dims = {}
        if pointwise:
            total = C * S
            keys = jax.random.split(jax.random.key(seed), total)
            flat = Tree(*(np.asarray(a)[:, keep].reshape(total, -1) for a in self.trees))
            train_bins, train_stats = jnp.asarray(self.train_bins), jnp.asarray(self.train_stats)
            codes = jnp.asarray(self.train_y)
            loglik, rep, sigma = over_draws(
                lambda draws, trees: _draw_pointwise(
                    keys[draws], trees, train_bins, train_stats, self.likelihood, codes
                ),
                flat, np.arange(total),
            )
            n = self.train_bins.shape[0]
            groups["log_likelihood"] = {"y": loglik.reshape(C, S, n)}
            groups["posterior_predictive"] = {"y": rep.reshape(C, S, n)}
            observed = self.train_y if self.task == "regression" else np.asarray(self.train_y, np.float32)
            groups["observed_data"] = {"y": np.asarray(observed)}
            if self.task == "regression":
                posterior["sigma"] = sigma.reshape(C, S)
            dims = {"y": ["obs"]}
        return make_inference_data(groups, dims=dims)

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path) -> None:
        """Pickle the posterior (numpy arrays and plain dataclasses only)."""
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        state["trees"] = tuple(np.asarray(a) for a in self.trees)
        with open(path, "wb") as fh:
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def load(cls, path) -> "Posterior":
        with open(path, "rb") as fh:
            state = pickle.load(fh)
        state["trees"] = Tree(*state["trees"])
        return cls(**state)


@dataclass(eq=False)
class PCFGPosterior(Posterior):
    """Exact BCART-PCFG draws (independent; ``stats["accepted"]`` is all True and there is no
    warm-up) plus the box grammar they were drawn from, which answers exactly what draws only
    estimate: ``predict`` / ``predict_proba`` are the exact posterior predictive over all trees,
    ``map_tree`` the exact MAP tree.  With ``num_samples=0`` there are no draws (the grammar alone;
    what needs draws — ``predict_draws``, ``to_arviz``, intervals — is then unavailable).

    Extra attributes
    ----------------
    grammar : :class:`~bdtree_jax.pcfg.BoxGrammar`.
    """

    grammar: Any = None

    def _mean_prediction(self, X, chunk: int = 256) -> np.ndarray:
        """(n, P) exact posterior predictive over all trees (:meth:`predictive`): what ``predict``
        and ``predict_proba`` report here (the draws' average is ``predict_draws(X).mean(0)``)."""
        return self.predictive(X)

    @property
    def boundary_thresholds(self) -> list:
        """Per feature, the raw thresholds of its code boundaries, (B_f - 1,) each (with
        bucketing: the only splits the prior allows)."""
        g = self.grammar
        return [self.grid.thresholds[f, g.cand_cut[g.cand_feature == f]] for f in range(g.n_features)]

    def _codes(self, X) -> np.ndarray:
        """Codes (n, F) of new rows: ``code <= t`` iff ``bin <= cand_cut[t]``, so the code is the
        number of the feature's boundary cuts below the row's bin."""
        bins, g = self._bins(X), self.grammar
        return np.stack(
            [np.searchsorted(g.cand_cut[g.cand_feature == f], bins[:, f], side="left") for f in range(g.n_features)],
            axis=1,
        ).astype(np.int32)

    def map_tree(self) -> Tree:
        """The exact maximum a posteriori tree (from ``Q_max``; not just the best draw)."""
        from ..pcfg import map_tree

        return map_tree(self.grammar)

    def log_prob(self, tree: Tree) -> float:
        """Exact ``log Pr[tree | X, Y]`` (``-inf`` for trees the prior excludes)."""
        from ..pcfg import log_prob

        return log_prob(self.grammar, tree, self.train_bins, self.train_stats)

    @property
    def log_evidence(self) -> float:
        """``log p(Y | X)`` under the PCFG prior: the posterior's normaliser over the prior's."""
        return self.grammar.log_evidence

    def predictive(self, X) -> np.ndarray:
        """Exact posterior predictive over *all* trees, (n, P): class probabilities, or the mean
        of the regression function.  A dynamic program over the boxes, no sampling error."""
        from ..pcfg import predictive

        return predictive(self.grammar, self._codes(X))

    def sample_paths(self, X, num: int = 1000, *, seed: int = 0, best: bool = False) -> np.ndarray:
        """The paper's Algorithm 1: for each row of X, ``num`` independent posterior trees' answers
        drawn along the row's path only, (num, n, P) leaf posterior means.  ``best=True``:
        Algorithm 2, the MAP tree's answer, (1, n, P)."""
        from ..pcfg import sample_paths

        boxes = sample_paths(self.grammar, jax.random.key(seed), self._codes(X), 1 if best else num,
                             mode="max" if best else "sample")
        return np.asarray(self.likelihood.leaf_mean(jnp.asarray(self.grammar.stats[boxes])))

    def _extra_summary(self) -> dict:
        return dict(n_boxes=self.grammar.n_boxes, log_evidence=self.log_evidence)


@dataclass(eq=False)
class SMCPosterior(Posterior):
    """Draws of top-down SMC (:mod:`~bdtree_jax.kernels.smc`): each "chain" is an independent
    SMC run, and its ``num_samples`` draws are resampled (multinomially, with replacement) from
    the run's final weighted particles, so every :class:`Posterior` method works unchanged.

    Extra attributes
    ----------------
    particles : Tree of (C, P, N) arrays, the final particles of every run.
    particle_log_weights : (C, P) unnormalised final log weights.
    run_log_evidence : (C,) each run's estimate of ``log p(Y | X)``.
    """

    particles: Any = None
    particle_log_weights: Any = None
    run_log_evidence: Any = None

    @property
    def log_evidence(self) -> float:
        """``log p(Y | X)`` estimated by the mean of the runs' (unbiased) evidence estimates."""
        z = np.asarray(self.run_log_evidence, np.float64)
        return float(np.logaddexp.reduce(z) - np.log(len(z)))

    def particle_weights(self) -> np.ndarray:
        """(C, P) normalised final weights of each run's particles."""
        lw = np.asarray(self.particle_log_weights, np.float64)
        return np.exp(lw - np.logaddexp.reduce(lw, axis=1, keepdims=True))


def posterior_from_traces(traces: dict, num_warmup: int, **model) -> Posterior:
    """Split the driver's traces into warm-up and kept draws and build a :class:`Posterior`."""
    trees = Tree(*(np.asarray(a[:, num_warmup:]).astype(np.int32 if a.dtype != bool else bool) for a in traces["tree"]))
    names = [k for k in traces if k != "tree"]  # _SCALARS and kernel extras (e.g. swap statistics)
    stats = {k: np.asarray(traces[k][:, num_warmup:]) for k in names}
    stats["log_posterior"] = stats["log_lik"] + stats["log_prior"]
    warm = {k: np.asarray(traces[k][:, :num_warmup]) for k in names}
    warm["log_posterior"] = warm["log_lik"] + warm["log_prior"]
    return Posterior(trees=trees, stats=stats, warmup_stats=warm, **model)
