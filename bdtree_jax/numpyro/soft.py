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

The models and the prior are defined in :mod:`bdtree_jax.soft_models`, the topology moves
(:func:`propose_topology`, :func:`feature_sweep`) in :mod:`bdtree_jax.kernels.rjhmc`; this module
is where they are used from.

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
from numpyro.infer.gibbs import Gibbs, conditioned, discrete_support_sizes, prototype_trace, with_conditioning
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import potential_energy
from numpyro.util import identity

from ..kernels.rjhmc import feature_sweep, propose_topology
from ..soft_models import TreeTopology, classification_model, regression_model, soft_tree

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
