"""RJHMC-Tree's soft-tree models as NumPyro models: the topology prior (:class:`TreeTopology`), a
soft tree's sample sites (:func:`soft_tree`) and the paper's classification and regression models
written with it (:func:`classification_model`, :func:`regression_model`), which the built-in
sampler (:mod:`bdtree_jax.kernels.rjhmc`) runs.  :mod:`bdtree_jax.numpyro` is where users meet
them, next to the NumPyro kernels that update a soft tree inside any model.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

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
from ._validate import check_one_of

__all__ = ["KINDS", "TreeTopology", "soft_tree", "classification_model", "regression_model"]

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
    def has_enumerate_support(self):
        """Not a flag: a soft tree's topology is neither enumerated nor left to NUTS/HMC/SVI, which
        ask this of every discrete site before they start; the answer is an error that names the
        kernel that updates it."""
        raise ValueError(
            "A soft tree's topology (bdtree_jax.numpyro.soft_tree) is a discrete structure that NUTS, HMC and SVI "
            "cannot update or enumerate. Run the model with MCMC(TreeKernel(NUTS(model, "
            "find_heuristic_step_size=False), tree=<the name given to soft_tree>), ...) (bdtree_jax.numpyro.TreeKernel), which updates the "
            "topology by grow/prune Metropolis-Hastings and every continuous site by NUTS.")

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
    check_one_of("soft_tree: kind", kind, KINDS)
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
    (the reference puts this prior on the standard deviation; ``docs/theory/rjhmc.md``)."""
    phi, _ = _soft_tree("tree", X, max_depth=max_depth, h=h, kind=kind, alpha=alpha, beta=beta)
    mu = numpyro.sample("leaf_mean", dist.Normal(mu_mean, mu_scale).expand([phi.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.InverseGamma(sigma_shape, sigma_scale))
    numpyro.sample("y", dist.Normal(phi @ mu, sigma), obs=y)
