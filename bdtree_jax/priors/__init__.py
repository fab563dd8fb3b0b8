"""The CGM98 tree prior shared by every hard-split sampler.

A node at depth ``d`` splits with probability ``alpha * (1 + d) ** -beta``; the probability is 0 at
``max_depth`` and 0 where no candidate cut leaves both children with at least ``min_leaf_size``
rows.  The rule is uniform over the features that have a valid cut in the node, then a cut among
that feature's valid cuts chosen by ``split_prior``.  The prior is therefore *truncated* at
``max_depth`` (renormalised by construction: a node at ``max_depth`` is a leaf with probability 1).

Valid cuts of feature ``f`` in a node form the integer interval ``[lo_f, hi_f)`` where ``lo_f`` is
the ``m``-th smallest bin of the node's rows and ``hi_f`` the ``(n_node - m + 1)``-th smallest
(``m = min_leaf_size``); for ``m = 1`` these are the node's minimum and maximum bins.

``split_prior`` (:class:`TreePrior`) picks the cut of feature ``f``:

* ``"uniform"`` (default, CGM98): uniform over the valid cuts, ``p(c) = 1 / (hi_f - lo_f)``.
* ``"range"`` (Lakshminarayanan et al. 2013): proportional to the width of the cut's gap in the
  feature's own units.  Cut ``c`` separates the global sorted distinct training values
  ``u_c < u_{c+1}`` of the feature; with ``w_f[c] = u_{c+1} - u_c``,
  ``p(c) = w_f[c] / sum(w_f[c'] for c' in [lo_f, hi_f))``.  With ``min_leaf_size = 1`` this is
  exactly "draw ``tau ~ U(node min, node max)`` and snap it to the global gap that contains it";
  for ``min_leaf_size > 1`` the same formula is applied over the valid-cut interval (the gaps
  between the ``m``-th smallest and the ``m``-th largest value of the node's rows).

Both use one table, :attr:`~bdtree_jax.data.TreeData.cut_cumwidth` (cumulative weights per
feature; ``arange`` for "uniform", so its draws and log-probabilities are those of the plain
uniform rule bit for bit): ``p(c) = (cum[f, c+1] - cum[f, c]) / (cum[f, hi] - cum[f, lo])``.
The "range" table is float32 and normalised per feature, so its probabilities are exact up to
float32 rounding relative to the feature's range.

``valid_cuts`` (:class:`TreePrior`) says where a node's valid cuts come from:

* ``"data"`` (default, CGM98): the cuts that split the node's training rows, as above.
* ``"ancestors"`` (BART: Chipman, George & McCulloch 2010 as implemented by BayesTree, the BART
  package and bartz): the root's valid cuts of feature ``f`` are all its candidate cuts
  ``[0, cut_count_f)``, a left child's are its parent's below the parent's cut on the parent's
  feature and a right child's those above (``[lo, c)`` and ``[c + 1, hi)``); the other
  features' are inherited.  Rule availability, split probabilities and the rule prior then do not
  depend on the data (a node may split although its rows are all on one side, so leaves can be
  small or empty).  ``min_leaf_size`` becomes a *truncation*: trees with a leaf of fewer than
  ``min_leaf_size`` training rows have prior 0 (1, the default: no empty leaves; BayesTree
  uses 5), and the rest is renormalised (a global constant that :func:`log_tree_prior` omits,
  exact for every MH ratio).  The bounds ``lo, hi`` of every node are then
  :func:`ancestor_bounds` of the tree and a grow computes its children's in O(F)
  (:func:`child_bounds`), with no pass over the rows -- what makes BART's sweep cheap.

**Pinball prior** (``structure="pinball"``; Wu, Tjelmeland & West 2007's mechanism, with the
parametrisation derived in ``docs/theory/pinball.md``, not a transcription of the paper).
The tree's number of leaves ``K`` has its own law and the shape its own::

    K - 1 ~ Poisson(pinball_rate)  truncated to 1 <= K <= K_max       (p_size)
    k_L - 1 | k ~ BetaBinomial(k - 2, pinball_balance, pinball_balance)  (p_shape, k >= 2)

A node holding ``k >= 2`` leaf counts splits them into ``k_L`` left and ``k - k_L`` right; a node
holding 1 is a leaf.  ``pinball_balance`` (``γ``) large favours balanced splits, ``γ < 1``
unbalanced (``γ = 1``: ``k_L`` uniform on ``1..k-1``).  Rules are the same rule prior as above
(uniform valid feature, then a cut by ``split_prior``)::

    π(T) ∝ p_size(K) · Π_internal p_shape(k_L(η) | k(η)) · Π_internal p_rule(η)

No factor for leaves (their number is fixed by ``K``).  ``K_max`` (``pinball_max_leaves``)
defaults to the padded heap's leaf capacity ``2**max_depth`` and cannot exceed it.  The prior
is **truncated**: a tree deeper than ``max_depth``, with a rule that is not a valid cut of its
node's rows, or cutting a box has prior 0, and the rest is renormalised (a global constant, so
exact for every MH ratio; :func:`log_tree_prior` omits it).  Because of that truncation the size
law of the normalised prior is ``p_size(K) Z_K / sum_K' p_size(K') Z_K'`` with ``Z_K`` the
probability that the generative process with ``K`` leaves yields a valid tree on the data (1 when
every node it can reach holding >= 2 counts has a valid cut within the depth, e.g. small ``K``);
the same holds for the balance law.  The numeric tables (:class:`PinballTables`) travel in
:attr:`TreeData.split_prob <bdtree_jax.data.TreeData>` in place of the CGM98 split
probabilities, so changing ``pinball_rate``, ``pinball_balance`` or ``pinball_max_leaves``
reuses compiled programs.  Samplers: CGM (``method="cgm"``, also with ``proposal="cgm+perturb"``),
whose MH ratios use the full ``log p(T*) - log p(T)``, and WU (``method="wu"``: its restructure's
``Φ`` and fibre DP with the shape factors, :mod:`bdtree_jax.kernels.wu`); the samplers that draw
subtrees or rules from the CGM98 generative process (regrow, the edit prior, SMC, PG, BART) raise
a ``ValueError`` naming ``structure``.

The package's modules: :mod:`~bdtree_jax.priors.tree_prior` (:class:`TreePrior`, its density
:func:`log_tree_prior` and the draws from it), :mod:`~bdtree_jax.priors.pinball` (the pinball
prior's tables and shape law), :mod:`~bdtree_jax.priors.valid_cuts` (every node's valid-cut
interval), :mod:`~bdtree_jax.priors.node_sums` (per-node sums of the rows' statistics),
:mod:`~bdtree_jax.priors.boxes` (box constraints) and :mod:`~bdtree_jax.priors.tree_data` (the
kernels' :class:`~bdtree_jax.data.TreeData` built from a prior and a likelihood).
"""

from ..data import SPLIT_PRIORS, VALID_CUTS
from .boxes import box_sides, violates_boxes
from .node_sums import SCATTER_LANES, node_lanes, node_stats, reduce_subtrees, subtree_sums, sum_by_lane, sum_by_node
from .pinball import (
    PinballTables, check_cgm_structure, log_pinball_structure, pinball_log_shape, pinball_log_shape_parts,
    pinball_log_size, pinball_shape, split_mask,
)
from .tree_data import make_tree_data
from .tree_prior import (
    STRUCTURES, TreePrior, draw_cut, log_cut_probs, log_rule_prob, log_tree_prior, pinball_tables, regrow_subtree,
    split_probability, splittable,
)
from .valid_cuts import (
    ancestor_bounds, ancestor_level_bounds, check_valid_cuts, child_bounds, leaf_size_log_prior, level_bounds,
    mask_bounds, node_bounds,
)

__all__ = [
    "TreePrior", "mask_bounds", "level_bounds", "node_bounds", "node_stats", "log_tree_prior", "split_probability", "box_sides",
    "violates_boxes", "regrow_subtree", "log_rule_prob", "log_cut_probs", "draw_cut", "SPLIT_PRIORS",
    "STRUCTURES", "PinballTables", "pinball_tables", "pinball_log_size", "pinball_log_shape",
    "pinball_log_shape_parts", "pinball_shape",
    "check_cgm_structure", "sum_by_node", "node_lanes", "sum_by_lane", "VALID_CUTS", "ancestor_bounds", "child_bounds",
    "check_valid_cuts", "leaf_size_log_prior", "splittable", "subtree_sums", "SCATTER_LANES", "reduce_subtrees",
    "split_mask", "log_pinball_structure", "ancestor_level_bounds", "make_tree_data",
]
