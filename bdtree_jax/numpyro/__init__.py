"""NumPyro primitives: decision trees inside any NumPyro model.

Hard-split trees (:mod:`~bdtree_jax.numpyro.sites`, :mod:`~bdtree_jax.numpyro.gibbs`):

* :func:`bart` declares a sum-of-trees function (the BART prior) and returns its values at the
  rows, (n,), for use anywhere in the model; several per model are allowed (one for the mean,
  one for ``log sigma``, ...).
* :func:`cart` declares one tree with the CGM98 prior: its values at the rows, or its (n, N)
  leaf indicators for leaf parameters of the model's own.
* :class:`TreeGibbs` updates every tree site by an exact kernel chosen from the model's form
  (conjugate backfitting for a normal observation, Albert–Chib for a probit one,
  Metropolis–Hastings with Laplace leaf proposals otherwise), then the inner NUTS/HMC kernel on
  the continuous sites: ``MCMC(TreeGibbs(NUTS(model)), ...)``.

Soft trees (:mod:`~bdtree_jax.numpyro.soft`, the RJHMC-Tree paper's models):

* :func:`soft_tree` declares a padded soft tree's sites and returns the leaf-membership matrix
  ``phi`` (n, N); :class:`TreeKernel` updates its topology by grow/prune MH and the continuous
  sites by NUTS; :func:`classification_model` / :func:`regression_model` are the paper's models.
"""

from .gibbs import KINDS, TreeGibbs, TreeGibbsState
from .sites import HardTreePrior, bart, cart, posterior_samples
from .soft import (TopologyMH, TopologyMHState, TreeKernel, TreeTopology, classification_model, feature_sweep,
                   propose_topology, regression_model, soft_tree)

__all__ = [
    "bart", "cart", "posterior_samples", "TreeGibbs", "TreeGibbsState", "HardTreePrior", "KINDS",
    "TreeTopology", "soft_tree", "classification_model", "regression_model", "TopologyMH", "TopologyMHState",
    "TreeKernel", "propose_topology", "feature_sweep",
]
