"""The result of an RJHMC-Tree run: soft-tree draws, predictions, tree text and ArviZ export."""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..data import check_X
from ..tree import _fmt, over_draws
from . import streaming
from .hard import _DrawSummaries
from .streaming import draw_blocks, normal_rows, pad_rows, row_blocks

__all__ = ["SoftTreePosterior", "soft_posterior_from_traces"]

# ----------------------------------------------------------------------------------------------
# Soft trees (RJHMC-Tree)


def _soft_right(draw, X, h, kind):
    from ..soft import right_prob_df, right_prob_dfi

    if "tree_weights" in draw:
        return right_prob_dfi(X, draw["tree_weights"], draw["tree_tau"], h)
    return right_prob_df(X, draw["feature"], draw["tree_tau"], h)


def _soft_leaf_probs(draw, X_train, onehot, h, concentration, kind):
    """Posterior-mean class probabilities of every slot (N, K) from the soft training counts."""
    from ..soft import leaf_membership

    phi = leaf_membership(draw["is_split"], _soft_right(draw, X_train, h, kind))
    counts = phi.T @ onehot
    k = onehot.shape[-1]
    return counts, (counts + concentration) / (counts.sum(-1, keepdims=True) + k * concentration)


@functools.partial(jax.jit, static_argnames=("kind",))
def _soft_predict(draws, X_train, onehot, X_test, h, concentration, kind):
    """Per draw, the hard-assigned (``h -> 0`` path) leaf's parameter at each test row:
    (draws, n_test, P) class probabilities or leaf means (``docs/theory/rjhmc.md``)."""
    from ..soft import hard_leaf

    def one(draw):
        leaf = hard_leaf(draw["is_split"], _soft_right(draw, X_test, h, kind))
        if "leaf_mean" in draw:
            return draw["leaf_mean"][leaf][:, None]
        _, probs = _soft_leaf_probs(draw, X_train, onehot, h, concentration, kind)
        return probs[leaf]

    return jax.vmap(one)(draws)


@functools.partial(jax.jit, static_argnames=("n_rows", "n_total", "width"))
def _noise(keys, start, n_rows: int, n_total: int, width: int):
    """(D, n_rows, width) rows ``start : start + n_rows`` of ``normal(keys[d], (n_total, width))``."""
    return jax.vmap(lambda k: normal_rows(k, start, n_rows, n_total, (width,)))(keys)


@functools.partial(jax.jit, static_argnames=("kind",))
def _soft_pointwise(keys, draws, X_train, onehot, y, h, concentration, kind):
    """Per draw: pointwise log-likelihood of the training rows under the soft tree at ``h`` and a
    replicated response; classification draws the leaf probabilities from their Dirichlet
    conditional given the soft counts.  (draws, n) each."""
    from ..soft import leaf_membership

    def one(key, draw):
        phi = leaf_membership(draw["is_split"], _soft_right(draw, X_train, h, kind))
        k1, k2 = jax.random.split(key)
        if "leaf_mean" in draw:
            mu, sigma = phi @ draw["leaf_mean"], draw["sigma"]
            loglik = -0.5 * (jnp.log(2 * jnp.pi * sigma**2) + (y - mu) ** 2 / sigma**2)
            return loglik, mu + sigma * jax.random.normal(k2, mu.shape)
        counts, _ = _soft_leaf_probs(draw, X_train, onehot, h, concentration, kind)
        p = jax.random.dirichlet(k1, counts + concentration)  # (N, K)
        row_probs = phi @ p  # (n, K) mixture over leaves
        loglik = jnp.log(jnp.take_along_axis(row_probs, y[:, None].astype(jnp.int32), axis=1)[:, 0])
        return loglik, jax.random.categorical(k2, jnp.log(row_probs)).astype(jnp.float32)

    return jax.vmap(one)(keys, draws)


@dataclass(eq=False)
class SoftTreePosterior(_DrawSummaries):
    """Draws of RJHMC-Tree (HMC-DF / HMC-DFI); arrays are numpy with leading axes ``(chain, draw)``.
    The fields every posterior shares are described on the base class; ``stats`` adds
    ``move`` (0 grow, 1 prune, 2 stay, 3 change), ``log_alpha``, ``step_size``, ``nuts_accept``,
    ``nuts_grads`` and ``diverging``, with ``log_lik`` at ``h_final`` and ``log_prior`` of the topology."""

    draws: dict
    """``is_split`` (C, S, N) bool topology, ``feature`` (C, S, M) split features (HMC-DF),
    ``tree_tau`` (C, S, M) thresholds in scaled units, ``tree_weights`` (C, S, M, F) (HMC-DFI),
    ``leaf_mean`` (C, S, N) and ``sigma`` (C, S) (regression).  Entries of slots that do not split
    / are not leaves are padding."""
    config: Any
    """The :class:`~bdtree_jax.kernels.rjhmc.RJHMCConfig` of the run."""
    x_min: np.ndarray
    """(F,) the training minimum of each feature (min-max scaling)."""
    x_range: np.ndarray
    """(F,) the training range of each feature (min-max scaling)."""
    train_X: np.ndarray
    """(n, F) scaled training inputs."""
    method: str = field(default="hmc-df", kw_only=True)

    @property
    def num_chains(self) -> int:
        return self.draws["is_split"].shape[0]

    @property
    def num_draws(self) -> int:
        return self.draws["is_split"].shape[1]

    def _flat(self, keep=None) -> dict:
        out = {}
        for k, v in self.draws.items():
            v = np.asarray(v)
            if keep is not None:
                v = v[:, keep]
            out[k] = v.reshape((-1,) + v.shape[2:])
        if "feature" in out:
            out["feature"] = out["feature"].astype(np.int32)
        if "tree_weights" in out:
            out.pop("feature", None)
        return out

    def _scaled(self, X) -> np.ndarray:
        X, names = check_X(X, name="X")
        if X.shape[1] != len(self.x_min):
            raise ValueError(f"X has {X.shape[1]} features but the posterior was fitted with {len(self.x_min)}.")
        if names is not None and self.feature_names and names != list(self.feature_names):
            raise ValueError(f"X has feature names {names} but the posterior was fitted with {list(self.feature_names)}.")
        return ((X - self.x_min) / self.x_range).astype(np.float32)

    def _onehot(self):
        k = 1 if self.classes is None else len(self.classes)
        return jnp.asarray(np.eye(k, dtype=np.float32)[np.asarray(self.train_y, int)] if self.classes is not None
                           else np.zeros((len(self.train_y), 1), np.float32))

    # -- prediction ----------------------------------------------------------------------------
    _inputs = _scaled

    def _tables(self, sample: bool = False, seed: int = 0) -> dict:
        """The flat draws (each (D, ...)) and, for ``sample``, one key per draw (its noise)."""
        flat = self._flat()
        out = {"flat": flat}
        if sample:
            out["keys"] = jax.random.split(jax.random.key(seed), flat["is_split"].shape[0])
        return out

    def _rows(self, tables: dict, Xs: np.ndarray, start: int, stop: int, predictive: bool = False,
              chunk: int = 256) -> np.ndarray:
        """(D, stop - start, P) float32: every draw at the scaled rows ``Xs[start:stop]`` (plus
        ``sigma * noise`` with ``predictive``; the noise of draw ``d`` at row ``i`` is element ``i``
        of ``normal(keys[d], (n, 1))``), in chunks of draws x rows within the budget.  The
        training rows' soft counts (classification) are computed per chunk of draws over all
        training rows at once (their sums are matrix products)."""
        flat = tables["flat"]
        D, N = flat["is_split"].shape
        n_train, P, m = len(self.train_X), self._n_params, stop - start
        draws = streaming.draws_per_chunk(D, n_train, 8 * (2 * N + P), max_draws=chunk)
        rows = streaming.rows_per_chunk(m, draws, 24 + 8 * (N + P))
        X_train, onehot = jnp.asarray(self.train_X), self._onehot()
        cfg = self.config
        out = np.empty((D, m, P), np.float32)
        for sel, pad in draw_blocks(np.arange(D), draws):
            d = {k: jnp.asarray(v[pad]) for k, v in flat.items()}
            for s, e in row_blocks(m, rows):
                x = jnp.asarray(pad_rows(Xs, start + s, start + e, rows))
                f = np.asarray(_soft_predict(d, X_train, onehot, x, cfg.h_final, cfg.concentration, cfg.kind))
                f = f[: len(sel), : e - s]
                if predictive:
                    noise = np.asarray(_noise(tables["keys"][pad], start + s, rows, len(Xs), P))[: len(sel), : e - s]
                    f = f + np.asarray(flat["sigma"][sel], np.float32)[:, None, None] * noise
                out[sel[0] : sel[-1] + 1, s:e] = f
        return out

    def predict_draws(self, X, *, chunk: int = 256) -> np.ndarray:
        """(draws, n, P): per draw, the parameter of each row's leaf (class probabilities from the
        soft training counts, or the leaf mean), rows assigned by the ``h -> 0`` path at
        ``h_final`` as in the paper; in chunks of at most ``chunk`` draws x rows within
        :data:`~bdtree_jax.posterior.streaming.PREDICT_BUDGET_BYTES`."""
        Xs = self._scaled(X)
        return self._rows(self._tables(), Xs, 0, len(Xs), chunk=chunk)

    @property
    def nbytes_per_draw(self) -> int:
        """Bytes this posterior holds per kept draw: the arrays of ``draws`` and the per-draw
        ``stats``, totalled over chains and draws and divided by their number."""
        return streaming.nbytes_per_draw([*self.draws.values(), *self.stats.values()], self.num_chains,
                                         self.num_draws)

    # -- trees as text ---------------------------------------------------------------------------
    def _tree_string(self, c: int, s: int, thresholds: bool = True) -> str:
        is_split = np.asarray(self.draws["is_split"][c, s])
        tau = np.asarray(self.draws["tree_tau"][c, s]) if thresholds else None
        weights = np.asarray(self.draws["tree_weights"][c, s]) if "tree_weights" in self.draws else None
        feature = np.asarray(self.draws["feature"][c, s])

        def rule(i):
            if weights is not None:
                lhs = "+".join(f"{w:.2f}*x{f}" for f, w in enumerate(weights[i]))
                return lhs if tau is None else f"{lhs}<={tau[i]:.3g}"
            f = int(feature[i])
            if tau is None:
                return f"x{f}"
            return f"x{f}<={_fmt(self.x_min[f] + tau[i] * self.x_range[f])}"

        def rec(i):
            if i >= len(is_split) or not is_split[i]:
                return "L"
            return f"{rule(i)}({rec(2 * i + 1)},{rec(2 * i + 2)})"

        return rec(0)

    def tree_strings(self) -> list[str]:
        """Per draw, the tree with its rules in the original units (thresholds to 10 digits)."""
        return [self._tree_string(c, s) for c in range(self.num_chains) for s in range(self.num_draws)]

    def structure_strings(self) -> list[str]:
        """Per draw, the topology with split features but no thresholds (HMC-DF, e.g.
        ``x2(x3(L,L),L)``) or the bare topology (HMC-DFI, e.g. ``S(S(L,L),L)``)."""
        from ..exact import topology_string

        if self.config.kind == "dfi":
            return [topology_string(t) for t in np.asarray(self.draws["is_split"]).reshape(-1, self.draws["is_split"].shape[-1])]
        return [self._tree_string(c, s, thresholds=False) for c in range(self.num_chains) for s in range(self.num_draws)]

    def tree_frequencies(self, names: bool = False) -> dict[str, float]:
        """Visit frequency of every structure (:meth:`structure_strings`), most frequent first;
        ``names=True``: each ``x{f}`` written as the feature's name (:func:`named_structure`)."""
        strings = self.structure_strings()
        if names:
            strings = [named_structure(t, self.feature_names) for t in strings]
        counts = collections.Counter(strings)
        total = sum(counts.values())
        return {k: v / total for k, v in counts.most_common()}

    def most_visited_tree(self, names: bool = True) -> tuple[str, float]:
        """The most frequent structure with the features' names, as :meth:`tree_text` writes them
        (``names=False``: ``x{f}``, as :meth:`structure_strings`), and its frequency."""
        return next(iter(self.tree_frequencies(names).items()))

    def map_tree(self) -> str:
        """The draw with the highest (unnormalised) log posterior, as a string."""
        return self._tree_string(*self._map_index())

    def _map_index(self) -> tuple[int, int]:
        lp = np.asarray(self.stats["log_posterior"])
        c, s = np.unravel_index(np.argmax(lp), lp.shape)
        return int(c), int(s)

    def tree_text(self, chain: int | None = None, draw: int | None = None) -> str:
        """Indented text of one draw (default: the MAP draw) with its rules in the original units
        and, per leaf, the predicted class (soft training counts) or the leaf mean."""
        c, s = self._map_index() if chain is None else (chain, draw)
        d = {k: jnp.asarray(np.asarray(v)[c, s]) for k, v in self.draws.items()}
        if "tree_weights" in d:
            d.pop("feature", None)
        is_split = np.asarray(d["is_split"])
        if self.task == "classification":
            counts, probs = _soft_leaf_probs(d, jnp.asarray(self.train_X), self._onehot(), self.config.h_final,
                                             self.config.concentration, self.config.kind)
            counts, probs = np.asarray(counts), np.asarray(probs)
        names = self.feature_names
        lines = []

        def rec(i, indent):
            pad = "    " * indent
            if not is_split[i]:
                if self.task == "classification":
                    k = int(np.argmax(probs[i]))
                    lines.append(f"{pad}-> {self.classes[k]} (p={probs[i, k]:.2f}, n={counts[i].sum():.1f})")
                else:
                    lines.append(f"{pad}-> {float(d['leaf_mean'][i]):.4g}")
                return
            tau = float(d["tree_tau"][i])
            if "tree_weights" in d:
                w = np.asarray(d["tree_weights"][i])
                rule = " + ".join(f"{w[f]:.2f}*{names[f]}'" for f in range(len(w))) + f" <= {tau:.3g}"
            else:
                f = int(d["feature"][i])
                rule = f"{names[f]} <= {_fmt(self.x_min[f] + tau * self.x_range[f])}"
            lines.append(f"{pad}if {rule}:")
            rec(2 * i + 1, indent + 1)
            lines.append(f"{pad}else:")
            rec(2 * i + 2, indent + 1)

        rec(0, 0)
        if "tree_weights" in d:
            lines.append("(x' = min-max scaled inputs)")
        return "\n".join(lines)

    def plot_tree(self, ax=None):
        """The MAP draw's :meth:`tree_text` drawn on a matplotlib axis."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(8, 6))
        ax.axis("off")
        ax.text(0.0, 1.0, self.tree_text(), family="monospace", va="top", fontsize=8, transform=ax.transAxes)
        return ax

    # -- ArviZ -----------------------------------------------------------------------------------
    def to_arviz(self, *, pointwise: bool = True, seed: int = 0):
        """ArviZ data: ``posterior`` (``n_leaves``, ``depth``, and ``sigma`` for regression),
        ``sample_stats`` (``lp``, ``log_likelihood_hfinal``, ``log_prior``, ``accepted``, ``move``,
        ``step_size``, ``acceptance_rate`` (NUTS), ``n_steps``, ``diverging``) and with
        ``pointwise=True`` ``log_likelihood``/``posterior_predictive``/``observed_data`` (``y``,
        dimension ``obs``; soft memberships at ``h_final``)."""
        from .._arviz import make_inference_data

        C, S = self.num_chains, self.num_draws
        st = self.stats
        posterior = {"n_leaves": st["n_leaves"], "depth": st["depth"]}
        if "sigma" in self.draws:
            posterior["sigma"] = np.asarray(self.draws["sigma"])
        sample_stats = {
            "lp": st["log_posterior"], "log_likelihood_hfinal": st["log_lik"], "log_prior": st["log_prior"],
            "accepted": st["accepted"], "move": st["move"], "step_size": st["step_size"],
            "acceptance_rate": st["nuts_accept"], "n_steps": st["nuts_grads"], "diverging": st["diverging"] > 0,
            **{k: st[k] for k in _TEMPERING_STATS if k in st},
        }
        groups = {"posterior": posterior, "sample_stats": sample_stats}
        dims = {}
        if pointwise:
            flat = self._flat()
            total = C * S
            keys = jax.random.split(jax.random.key(seed), total)
            X_train, onehot = jnp.asarray(self.train_X), self._onehot()
            y = jnp.asarray(self.train_y)
            loglik, rep = over_draws(
                lambda idx, d: _soft_pointwise(keys[idx], d, X_train, onehot, y, self.config.h_final,
                                               self.config.concentration, self.config.kind),
                flat, np.arange(total),
                streaming.draws_per_chunk(total, len(self.train_y), 8 * (2 * flat["is_split"].shape[1] + self._n_params) + 32),
            )
            n = len(self.train_y)
            groups["log_likelihood"] = {"y": loglik.reshape(C, S, n)}
            groups["posterior_predictive"] = {"y": rep.reshape(C, S, n)}
            groups["observed_data"] = {"y": np.asarray(self.train_y, np.float32)}
            dims = {"y": ["obs"]}
        return make_inference_data(groups, dims=dims)


_SOFT_STATS = ("log_lik", "log_prior", "n_leaves", "depth", "accepted", "move", "log_alpha", "step_size",
               "nuts_accept", "nuts_grads", "diverging")
_TEMPERING_STATS = ("swap_pair", "swap_accepted")  # tempered runs: the swap proposed / accepted per iteration


def named_structure(text: str, feature_names) -> str:
    """``text`` (a tree or structure string) with every feature token ``x{f}`` replaced by
    ``feature_names[f]`` (``x2(x3(L,L),L)`` -> ``petal_length(petal_width(L,L),L)``); ``text``
    itself when there are no names."""
    import re

    if not feature_names:
        return text
    return re.sub(r"\bx(\d+)\b", lambda m: str(feature_names[int(m.group(1))]), text)


def soft_posterior_from_traces(traces: dict, num_warmup: int, **model) -> SoftTreePosterior:
    """Split RJHMC traces into warm-up and kept draws and build a :class:`SoftTreePosterior`."""
    draws = {"is_split": np.asarray(traces["is_split"][:, num_warmup:]),
             "feature": np.asarray(traces["feature"][:, num_warmup:])}
    for name, v in traces["params"].items():
        draws[name] = np.asarray(v[:, num_warmup:])
    names = [k for k in _SOFT_STATS + _TEMPERING_STATS if k in traces]
    stats = {k: np.asarray(traces[k][:, num_warmup:]) for k in names}
    stats["log_posterior"] = stats["log_lik"] + stats["log_prior"]
    warm = {k: np.asarray(traces[k][:, :num_warmup]) for k in names}
    warm["log_posterior"] = warm["log_lik"] + warm["log_prior"]
    return SoftTreePosterior(draws=draws, stats=stats, warmup_stats=warm, **model)
