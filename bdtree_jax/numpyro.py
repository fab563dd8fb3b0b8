"""NumPyro primitives: a soft decision tree inside any NumPyro model.

* :func:`soft_tree` declares a padded soft tree's sample sites (topology, thresholds, split
  features or weights) and returns the leaf-membership matrix ``phi`` (n, N), so a model can use
  it like any design matrix: ``mu = phi @ leaf_means + X @ beta``.
* :class:`TreeKernel` (a NumPyro :class:`~numpyro.infer.Gibbs` composite, in the spirit of
  ``HMCGibbs``) updates the topology by grow/prune Metropolis–Hastings and the discrete split
  features by a Metropolis-within-Gibbs sweep, while the inner NUTS kernel updates every continuous
  site of the model: ``MCMC(TreeKernel(NUTS(model)), num_warmup=..., num_samples=...)``.
* :func:`classification_model` / :func:`regression_model` are the RJHMC-Tree paper's models
  written with :func:`soft_tree`; the built-in sampler (:mod:`bdtree_jax.kernels.rjhmc`) runs them.

Sites of ``soft_tree("tree", ...)`` with ``M = 2**max_depth - 1`` splittable slots and ``N = 2M+1``
heap slots: ``tree_topology`` (N,) bool ~ :class:`TreeTopology`; ``tree_tau`` (M,) ~ U(0, 1);
``tree_feature`` (M,) ~ Categorical(1/F) (``kind="df"``) or ``tree_weights`` (M, F) ~
Dirichlet(1) (``kind="dfi"``).  Leaf parameters of your own model should have one entry per heap
slot (N,): entries of slots that are not leaves get zero weight in ``phi`` (they are padding
sampled from their prior), which keeps every shape fixed when the topology changes.

Inputs must be scaled to [0, 1] (the threshold prior is uniform there), e.g. with
``sklearn.preprocessing.MinMaxScaler`` fitted on the training data.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.infer.gibbs import Gibbs, conditioned, discrete_support_sizes, prototype_trace, with_conditioning
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import potential_energy
from numpyro.util import identity

from .soft import (
    dm_soft_log_lik,
    leaf_membership,
    leaf_mask,
    log_topology_prior,
    n_split_slots,
    right_prob_df,
    right_prob_dfi,
    topology_split_prob,
)
from .tree import Tree, active_nodes, n_nodes

__all__ = [
    "TreeTopology",
    "soft_tree",
    "classification_model",
    "regression_model",
    "TopologyMH",
    "TreeKernel",
    "propose_topology",
    "feature_sweep",
]

KINDS = ("df", "dfi")


class TreeTopology(dist.Distribution):
    """Prior over padded topologies ``is_split`` (N,) bool: the CGM prior ``alpha (1+d)^-beta``
    truncated at ``max_depth`` and conditioned on the root splitting (see :mod:`bdtree_jax.soft`)."""

    support = constraints.boolean
    pytree_aux_fields = ("max_depth", "alpha", "beta")

    def __init__(self, max_depth: int, alpha: float = 0.95, beta: float = 1.0, *, validate_args=None):
        if not isinstance(max_depth, (int, np.integer)) or max_depth < 1:
            raise ValueError(f"TreeTopology: max_depth must be an integer >= 1; got {max_depth!r}.")
        if not 0.0 < float(alpha) < 1.0:
            raise ValueError(f"TreeTopology: alpha must be in (0, 1); got {alpha!r}.")
        if not float(beta) >= 0.0:
            raise ValueError(f"TreeTopology: beta must be >= 0; got {beta!r}.")
        self.max_depth, self.alpha, self.beta = int(max_depth), float(alpha), float(beta)
        super().__init__(batch_shape=(), event_shape=(n_nodes(self.max_depth),), validate_args=validate_args)

    @property
    def split_prob(self) -> np.ndarray:
        return topology_split_prob(self.max_depth, self.alpha, self.beta)

    def sample(self, key, sample_shape=()):
        def one(k):
            want = (jax.random.uniform(k, (n_nodes(self.max_depth),)) < self.split_prob).at[0].set(True)
            return want & active_nodes(Tree(want, None, None))

        keys = jax.random.split(key, int(np.prod(sample_shape, dtype=int)))
        return jax.vmap(one)(keys).reshape(tuple(sample_shape) + self.event_shape)

    def log_prob(self, value):
        value = jnp.asarray(value, bool)
        flat = value.reshape(-1, value.shape[-1])
        out = jax.vmap(lambda v: log_topology_prior(v, self.split_prob))(flat)
        return out.reshape(value.shape[:-1])


def _soft_tree(name, X, *, max_depth, h, kind, alpha, beta):
    if kind not in KINDS:
        raise ValueError(f"soft_tree: kind must be one of {KINDS}; got {kind!r}.")
    X = jnp.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"soft_tree: X must be 2-D (n_samples, n_features); got shape {X.shape}.")
    n_features = X.shape[1]
    m = n_split_slots(max_depth)
    is_split = numpyro.sample(f"{name}_topology", TreeTopology(max_depth, alpha, beta))
    tau = numpyro.sample(f"{name}_tau", dist.Uniform(0.0, 1.0).expand([m]).to_event(1))
    if kind == "df" or n_features == 1:
        probs = jnp.full(n_features, 1.0 / n_features)
        feature = numpyro.sample(f"{name}_feature", dist.Categorical(probs=probs).expand([m]))
        psi = right_prob_df(X, feature, tau, h)
    else:
        weights = numpyro.sample(f"{name}_weights", dist.Dirichlet(jnp.ones(n_features)).expand([m]).to_event(1))
        psi = right_prob_dfi(X, weights, tau, h)
    return leaf_membership(is_split, psi), is_split


def soft_tree(name: str, X, *, max_depth: int, h: float, kind: str = "df", alpha: float = 0.95, beta: float = 1.0):
    """Declare a soft decision tree's sample sites and return its leaf memberships.

    Parameters
    ----------
    name : prefix of the sites (``{name}_topology``, ``{name}_tau``, ``{name}_feature`` or
        ``{name}_weights``).
    X : (n, F) inputs scaled to [0, 1].
    max_depth : padded depth; the tree has ``N = 2**(max_depth+1) - 1`` slots.
    h : split sharpness (> 0); ``P(right) = sigmoid((x_f - tau) / h)``.
    kind : "df" (one feature per split, discrete) or "dfi" (simplex weights over features).
    alpha, beta : topology prior ``alpha (1 + depth)^-beta``.

    Returns
    -------
    phi : (n, N) leaf memberships (zero on slots that are not leaves; rows sum to 1).

    Examples
    --------
    >>> def model(X, y=None):
    ...     phi = soft_tree("tree", X, max_depth=3, h=0.02)
    ...     leaf = numpyro.sample("leaf", dist.Normal(0, 1).expand([phi.shape[1]]).to_event(1))
    ...     sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    ...     numpyro.sample("y", dist.Normal(phi @ leaf, sigma), obs=y)
    """
    return _soft_tree(name, X, max_depth=max_depth, h=h, kind=kind, alpha=alpha, beta=beta)[0]


def classification_model(X, y, *, n_classes: int, max_depth: int, h, kind="df", alpha=0.95, beta=1.0,
                         concentration=1.0, keep_constant: bool = True):
    """RJHMC-Tree's classifier: Dirichlet–multinomial on soft counts (leaf probabilities integrated
    out).  ``y`` (n,) int codes.  ``keep_constant``: keep the per-leaf normalising constant (the
    full marginal, as CGM uses); the reference code drops it."""
    phi, is_split = _soft_tree("tree", X, max_depth=max_depth, h=h, kind=kind, alpha=alpha, beta=beta)
    onehot = jax.nn.one_hot(y, n_classes, dtype=phi.dtype)
    numpyro.factor("log_lik", dm_soft_log_lik(phi, onehot, leaf_mask(is_split), concentration, keep_constant))


def regression_model(X, y, *, max_depth: int, h, kind="df", alpha=0.95, beta=1.0, mu_mean=0.0, mu_scale=1.0,
                     sigma_shape=1.5, sigma_scale=1.5):
    """RJHMC-Tree's regression (Linero & Yang soft tree): ``y ~ N(phi @ leaf_mean, sigma^2)`` with
    ``leaf_mean`` (N,) ~ N(mu_mean, mu_scale^2) and ``sigma ~ InverseGamma(sigma_shape, sigma_scale)``
    (the reference puts this prior on the standard deviation; spec §1.4)."""
    phi, _ = _soft_tree("tree", X, max_depth=max_depth, h=h, kind=kind, alpha=alpha, beta=beta)
    mu = numpyro.sample("leaf_mean", dist.Normal(mu_mean, mu_scale).expand([phi.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.InverseGamma(sigma_shape, sigma_scale))
    numpyro.sample("y", dist.Normal(phi @ mu, sigma), obs=y)


# ----------------------------------------------------------------------------------------------
# Moves shared by TopologyMH and the RJHMC kernel


class TopologyProposal(NamedTuple):
    """A grow or prune proposal: the new topology, the node, whether it grows, and
    ``log q(T | T') - log q(T' | T)`` (spec §1.7, the ratio ``Q``)."""

    is_split: Any
    node: Any
    grow: Any
    log_q_ratio: Any


def _grow_probability(is_split, p_grow):
    """P(grow | topology move) in T: 1 for a one-split tree, 0 when no leaf can grow."""
    from .soft import growable_leaves

    n_int = is_split.sum()
    can_grow = growable_leaves(is_split).any()
    return jnp.where(~can_grow, 0.0, jnp.where(n_int <= 1, 1.0, p_grow))


def propose_topology(key, is_split, p_grow: float) -> TopologyProposal:
    """Grow a uniformly chosen growable leaf (with probability ``P_grow(T)``) or prune a uniformly
    chosen prunable node.  ``p_grow = p_g / (p_g + p_p)`` for trees with >= 2 splits."""
    from .soft import growable_leaves, prunable_nodes

    k_move, k_node = jax.random.split(key)
    pg = _grow_probability(is_split, p_grow)
    grow = jax.random.uniform(k_move) < pg
    growable, prunable = growable_leaves(is_split), prunable_nodes(is_split)
    mask = jnp.where(grow, growable, prunable)
    node = jax.random.categorical(k_node, jnp.where(mask, 0.0, -jnp.inf))
    new = is_split.at[node].set(grow)
    pg_new = _grow_probability(new, p_grow)
    n_from = jnp.where(grow, growable.sum(), prunable.sum())
    n_back = jnp.where(grow, prunable_nodes(new).sum(), growable_leaves(new).sum())
    p_from = jnp.where(grow, pg, 1.0 - pg)
    p_back = jnp.where(grow, 1.0 - pg_new, pg_new)
    log_q = jnp.log(p_back) - jnp.log(n_back) - jnp.log(p_from) + jnp.log(n_from)
    possible = mask.any() & (p_from > 0)
    return TopologyProposal(
        jnp.where(possible, new, is_split), node, grow, jnp.where(possible, log_q, -jnp.inf)
    )


def feature_sweep(key, feature, is_split, n_features: int, pe_fn, pe):
    """One Metropolis-within-Gibbs sweep over the split features of the splitting slots, in a
    random order (NumPyro ``DiscreteHMCGibbs(random_walk=True)`` semantics: propose uniformly over
    the features, the current one included); non-splitting slots are redrawn from their uniform
    prior (their exact conditional).  ``pe_fn(feature) -> potential``; returns ``(feature, pe)``."""
    m = feature.shape[-1]
    k_perm, k_prior, k_loop = jax.random.split(key, 3)
    order = jax.random.permutation(k_perm, m)
    splits = is_split[:m]
    fresh = jax.random.randint(k_prior, (m,), 0, n_features)
    feature = jnp.where(splits, feature, fresh)
    keys = jax.random.split(k_loop, m)

    def body(i, carry):
        feature, pe = carry
        slot = order[i]

        def update(carry):
            feature, pe = carry
            k1, k2 = jax.random.split(keys[i])
            proposal = feature.at[slot].set(jax.random.randint(k1, (), 0, n_features))
            pe_new = pe_fn(proposal)
            accept = jax.random.exponential(k2) > pe_new - pe
            return jnp.where(accept, proposal, feature), jnp.where(accept, pe_new, pe)

        return jax.lax.cond(splits[slot] & (n_features > 1), update, lambda c: c, (feature, pe))

    return jax.lax.fori_loop(0, m, body, (feature, pe))


# ----------------------------------------------------------------------------------------------
# NumPyro kernels


class TopologyMHState(NamedTuple):
    """``z``: the block's values (topology, and split features for ``kind="df"``);
    ``potential_energy`` under the current conditioning; ``accepted``: last topology move."""

    z: dict
    potential_energy: Any
    accepted: Any
    rng_key: Any


def _tree_sites(tree: str, model_trace) -> list[str]:
    if f"{tree}_topology" not in model_trace:  # (Gibbs calls this before TopologyMH.init)
        raise ValueError(
            f"TopologyMH: the model has no site {tree + '_topology'!r}; declare the tree with soft_tree({tree!r}, ...)."
        )
    return [s for s in (f"{tree}_topology", f"{tree}_feature") if s in model_trace]


class TopologyMH(MCMCKernel):
    """Gibbs block updating a :func:`soft_tree`'s topology (one grow/prune MH proposal) and, for
    ``kind="df"``, its split features (:func:`feature_sweep`), every other site held fixed.

    Exact for any model: the proposal flips one slot and keeps every other value, so the
    acceptance ratio is the potential difference times ``Q`` (the padded parameters of the new
    slots play the auxiliary variables, already distributed by their prior).
    """

    sample_field = "z"

    def __init__(self, model, *, tree: str = "tree", grow_prob: float = 0.5):
        if not 0.0 < float(grow_prob) < 1.0:
            raise ValueError(f"TopologyMH: grow_prob must be in (0, 1); got {grow_prob!r}.")
        self._model, self._tree, self._grow_prob = model, tree, float(grow_prob)
        self._n_features = None

    @property
    def model(self):
        return self._model

    def _potential_fn(self, model_args, model_kwargs):
        model = conditioned(self._model)

        def fn(z):
            return potential_energy(model, model_args, with_conditioning(model_kwargs, z), {})

        return fn

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        rng_key, key_trace = jax.random.split(rng_key)
        trace = prototype_trace(conditioned(self._model), key_trace, model_args, model_kwargs)
        topo = f"{self._tree}_topology"
        if topo not in trace:
            raise ValueError(f"TopologyMH: the model has no site {topo!r}; declare the tree with soft_tree({self._tree!r}, ...).")
        feat = f"{self._tree}_feature"
        self._n_features = int(np.max(discrete_support_sizes(trace, [feat])[feat])) if feat in trace else None
        init_params = {} if init_params is None else init_params
        z = {s: jnp.asarray(init_params.get(s, trace[s]["value"])) for s in _tree_sites(self._tree, trace)}
        pe = self._potential_fn(model_args, model_kwargs)(z)
        return TopologyMHState(z, jnp.asarray(pe), jnp.array(False), rng_key)

    def sample(self, state, model_args, model_kwargs):
        pe_fn = self._potential_fn(model_args, model_kwargs)
        topo, feat = f"{self._tree}_topology", f"{self._tree}_feature"
        rng_key, k_prop, k_acc, k_sweep = jax.random.split(state.rng_key, 4)
        z = state.z
        prop = propose_topology(k_prop, z[topo], self._grow_prob)
        z_new = {**z, topo: prop.is_split}
        pe_new = pe_fn(z_new)
        log_alpha = state.potential_energy - pe_new + prop.log_q_ratio
        accept = jax.random.exponential(k_acc) > -jnp.where(jnp.isnan(log_alpha), -jnp.inf, log_alpha)
        z = jax.tree.map(lambda a, b: jnp.where(accept, a, b), z_new, z)
        pe = jnp.where(accept, pe_new, state.potential_energy)
        if self._n_features is not None:
            feature, pe = feature_sweep(
                k_sweep, z[feat], z[topo], self._n_features, lambda f: pe_fn({**z, feat: f}), pe
            )
            z = {**z, feat: feature}
        return TopologyMHState(z, pe, accept, rng_key)

    def refresh(self, state, model_args, model_kwargs):
        return state._replace(potential_energy=jnp.asarray(self._potential_fn(model_args, model_kwargs)(state.z)))

    def wrap_model(self, wrapper):
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        return kernel

    def get_constrain_fn(self, model_args, model_kwargs):
        return identity


class TreeKernel(Gibbs):
    """Tree topology by grow/prune MH (+ split features by MH-within-Gibbs) and every continuous
    site by the inner NUTS/HMC kernel: ``MCMC(TreeKernel(NUTS(model)), ...)``.

    Parameters
    ----------
    inner_kernel : a NumPyro ``NUTS`` or ``HMC`` kernel built on the model.
    tree : the ``name`` given to :func:`soft_tree` in the model.
    grow_prob : P(grow) of a topology proposal (trees with one split always grow; full trees prune).

    Build the inner kernel with ``find_heuristic_step_size=False`` (NumPyro's advice for Gibbs
    blocks).  Samples contain the topology ``{tree}_topology`` (N,) bool per draw.
    """

    def __init__(self, inner_kernel, *, tree: str = "tree", grow_prob: float = 0.5):
        from numpyro.infer.hmc import HMC

        if not isinstance(inner_kernel, HMC) or inner_kernel.model is None:
            raise ValueError("TreeKernel: inner_kernel must be a NUTS or HMC kernel built on a model.")
        super().__init__(
            [
                (TopologyMH(inner_kernel.model, tree=tree, grow_prob=grow_prob), functools.partial(_tree_sites, tree)),
                (inner_kernel, None),
            ]
        )
