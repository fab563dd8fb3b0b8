"""BCART-PCFG: the exact posterior over trees by dynamic programming over bounding boxes.

Sullivan, Tiwari, Thrun & Piech (2023).  The tree prior is ``Pr[T | X] ∝ φ^(-b(T))`` (``b`` leaves)
over every tree that satisfies the paper's *Tree Constraints*: every node holds at least one
training row, and splits of a node that give the same two sets of rows are one split (whatever
feature or threshold produces them).  With a leaf-factorised marginal likelihood ``L`` the score
of a box ``N`` (a set of rows)::

    Q(N) = L(N) + (1/φ) Σ_{s ∈ S(N)} Q(N ∩ s) Q(N ∩ s̄)

sums ``φ^(1-b) Π L(leaves)`` over every subtree rooted at ``N``, and drawing productions top-down
with probabilities ``L(N)/Q(N)`` (stop) and ``Q(N∩s)Q(N∩s̄)/(φ Q(N))`` (split ``s``) samples trees
exactly from the posterior (paper eqs. 13-16, Theorem 5.1).  ``Q_max`` (max instead of sum) gives
the MAP tree.  Everything is in log space.

How it is computed
------------------
* **Codes.**  Each feature is coded by the rank of its (optionally bucketed, ``num_buckets``)
  value.  Candidate split ``k`` is "code of feature ``f_k`` ``<= t_k``"; there are
  ``K = Σ_f (B_f - 1)`` of them.  A row is stored as a *thermometer* bit vector: bit ``k`` is 1
  when the row goes right at candidate ``k``.
* **Boxes are sets of rows**, identified by their tight bounding box (the code range of their
  rows in every feature): two boxes with the same rows have the same key.  In thermometer form
  the tight box is the pair (bitwise AND, bitwise OR) over the rows, and candidate ``k`` splits a
  box into two non-empty boxes iff its code threshold lies inside the box's range.
* **Enumeration** (:func:`build_grammar`): breadth first from the root, a jitted, fixed-shape JAX
  program computes the tight boxes of both children of every (box, candidate) of a chunk of boxes
  (per feature, running AND / OR over the rows in sorted order give all its thresholds' children
  at once); the packed keys are merged into a sorted table on the host.  This is
  the memoised recursion keyed on the set of rows of a box, done a level at a time; its size is
  checked against ``max_boxes`` and the memory budget ``max_bytes`` before every level (a clear
  error, never an out-of-memory crash).
* **Duplicate splits** (same two row sets from different candidates) are removed per box, keeping
  the first candidate in (feature, threshold) order as the split's representative.
* **The DP** (:func:`_scores`) is a jitted JAX program over chunks of boxes.  Without a depth bound
  a child is strictly narrower than its parent (the width ``popcount(OR) - popcount(AND)`` drops),
  so one pass over boxes in order of width computes ``Q`` exactly.  With ``max_depth = D`` the
  score depends on the remaining depth and ``D + 1`` layers ``Q_r`` are computed
  (``Q_0 = L``; ``Q_r`` from ``Q_{r-1}``).  This is the prior ``φ^(-b(T))`` restricted to trees of
  depth at most ``D`` (renormalised over those trees): exactly the same posterior conditioned on
  ``depth(T) <= D``.

What you get
------------
:class:`BoxGrammar` holds the boxes, their splits and scores; :func:`sample_trees` draws whole trees
(padded heap :class:`~bdtree_jax.tree.Tree`, the library's format), :func:`map_tree` gives the
MAP tree, :func:`log_prob` the exact posterior probability of any tree, :func:`predictive` the exact
posterior predictive (average over *all* trees) by a second DP, :func:`sample_paths` the paper's
Algorithm 1 (only the path a query follows) and, with ``mode="max"``, Algorithm 2.  The
estimators' ``method="pcfg"`` wraps all of it in a :class:`PCFGPosterior`.

Categorical features (at most :data:`MAX_LEVELS` levels) and missing values
(docs/categorical-missing.md) are exact too: :mod:`~bdtree_jax.pcfg.mixed` builds their grammar
(level-set partitions, a missing-value bit per split with its prior factor 1/2, boxes keyed by
their rows), and everything below answers for it unchanged; its trees are
:class:`~bdtree_jax.tree.MixedTree`.

The package's modules: :mod:`~bdtree_jax.pcfg.grammar` (the enumeration of the boxes and the DP
that scores them: :class:`BoxGrammar`, :func:`build_grammar`), :mod:`~bdtree_jax.pcfg.mixed` (its
counterpart for categorical features and missing values) and :mod:`~bdtree_jax.pcfg.draws`
(what a built grammar answers: :func:`sample_trees`, :func:`map_tree`, :func:`log_prob`,
:func:`sample_paths`, :func:`predictive`, and :func:`query_codes` for new rows).  The feature codes are the data layer's
:func:`~bdtree_jax.data.code_features`.
"""

from ..data import code_features
from .draws import log_prob, map_tree, predictive, query_codes, sample_paths, sample_trees
from .grammar import BoxGrammar, build_box_grammar, estimate_boxes
from .mixed import build_grammar
from .mixed import MAX_LEVELS, code_mixed_features

__all__ = [
    "BoxGrammar",
    "code_features",
    "build_grammar",
    "build_box_grammar",
    "sample_trees",
    "map_tree",
    "log_prob",
    "predictive",
    "sample_paths",
    "estimate_boxes",
    "query_codes",
    "code_mixed_features",
    "MAX_LEVELS",
]
