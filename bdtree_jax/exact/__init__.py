"""Exact posterior over trees by brute-force enumeration (tiny data only).

An implementation independent of the JAX kernels — plain recursion in numpy over every tree the
prior allows — used by the tests of every hard-split sampler and useful to users checking a
sampler on a toy problem.  The number of trees grows super-exponentially: keep ``n`` and
``max_depth`` small (e.g. 6–10 rows, 2 features, depth 2–3).

The package's modules: :mod:`~bdtree_jax.exact.hard` (hard-split trees under the CGM98, pinball,
BCART-PCFG and EDITTREE priors, and the visit frequencies of sampled trees),
:mod:`~bdtree_jax.exact.categorical` (categorical features and missing values,
``docs/categorical-missing.md``, reached through :func:`enumerate_trees`) and
:mod:`~bdtree_jax.exact.soft` (soft-tree topologies, by numerical integration).
"""

from .hard import (
    enumerate_edit_posterior, enumerate_edit_prior, enumerate_pcfg_posterior, enumerate_pcfg_trees,
    enumerate_pinball_trees, enumerate_posterior, enumerate_trees, leaf_partition, tree_frequencies, tv_distance,
)
from .categorical import enumerate_mixed_trees, parse_tree_string, string_leaf_partition
from .soft import dm_log_lik, gaussian_leaf_log_lik, soft_topology_posterior, topology_string

__all__ = [
    "enumerate_trees", "enumerate_posterior", "tree_frequencies", "tv_distance", "topology_string", "soft_topology_posterior",
    "dm_log_lik", "gaussian_leaf_log_lik", "enumerate_pcfg_trees", "enumerate_pcfg_posterior",
    "enumerate_edit_prior", "enumerate_edit_posterior", "enumerate_pinball_trees", "leaf_partition",
    "enumerate_mixed_trees", "parse_tree_string", "string_leaf_partition",
]
