"""A plain-NumPy CGM98 sampler: the speed baseline for ``benchmarks/cgm_speed.py``.

Same model and kernel as :mod:`bdtree_jax.kernels.cgm` (classification only):

* prior: a node at depth ``d`` splits with probability ``alpha * (1 + d) ** -beta``, 0 at
  ``max_depth`` and 0 where no cut leaves both children with ``>= min_leaf_size`` rows; the rule
  is uniform over the features with a valid cut, then uniform over that feature's valid cuts;
* Dirichlet–multinomial leaves (integrated likelihood, all constants kept);
* grow / prune / change / swap proposed with probabilities (0.25, 0.25, 0.40, 0.10),
  renormalised over the moves that have a target in the current tree; the target node is uniform
  among the move's targets; grow and change draw the rule from the prior's rule distribution;
* exact MH ratio ``L(T*) p(T*) q(T|T*) / (L(T) p(T) q(T*|T))`` including the move
  renormalisation and node-count terms of both directions.

It is written the way one would write it without heroic optimisation: one Python object per node,
each caching its row indices, class counts, valid-cut bounds and leaf log-likelihood; a proposal
builds the new subtree (re-partitioning rows only below the changed node), installs it, counts the
move targets by walking the tree, and puts the old subtree back if the move is rejected.

Run ``python benchmarks/numpy_cgm.py`` for the self-check against
:func:`bdtree_jax.exact.enumerate_posterior` on a 6-point toy problem.
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
from scipy.special import gammaln

# Run from a checkout without installing: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

__all__ = ["NumpyCGM", "check_against_exact"]

MOVES = ("grow", "prune", "change", "swap")
_REVERSE = (1, 0, 2, 3)


class Node:
    __slots__ = ("rows", "depth", "counts", "lo", "hi", "width", "n_valid", "can_split", "leaf_ll",
                 "feature", "cut", "left", "right")

    def __init__(self, rows, depth):
        self.rows = rows
        self.depth = depth
        self.feature = -1
        self.cut = -1
        self.left = None
        self.right = None

    @property
    def is_split(self):
        return self.left is not None


class NumpyCGM:
    """One CGM chain on binned data.

    Parameters
    ----------
    bins : (n, F) int, row ``i`` goes left at cut ``c`` of feature ``f`` iff ``bins[i, f] <= c``.
    codes : (n,) int class codes in ``0..K-1``.
    n_classes, concentration : the Dirichlet–multinomial likelihood.
    max_depth, alpha, beta, min_leaf_size : the tree prior.
    move_probs : (grow, prune, change, swap).
    seed : int.
    """

    def __init__(self, bins, codes, n_classes, *, concentration=1.0, max_depth=6, alpha=0.95, beta=1.0,
                 min_leaf_size=1, move_probs=(0.25, 0.25, 0.40, 0.10), seed=0):
        self.bins = np.asarray(bins, np.int64)
        self.codes = np.asarray(codes, np.int64)
        self.K = int(n_classes)
        self.a = float(concentration)
        self.max_depth = int(max_depth)
        self.m = int(min_leaf_size)
        self.p_split = [alpha * (1.0 + d) ** (-beta) if d < max_depth else 0.0 for d in range(max_depth + 1)]
        self.move_probs = np.asarray(move_probs, float)
        self.rng = np.random.default_rng(seed)
        self.ll_const = gammaln(self.K * self.a) - self.K * gammaln(self.a)
        self.root = self._make_node(np.arange(self.bins.shape[0]), 0)
        self.log_lik = self._subtree_lik(self.root)
        self.log_prior = self._subtree_prior(self.root)
        self.n_accepted = np.zeros(4, np.int64)
        self.n_proposed = np.zeros(4, np.int64)

    # -- node caches ------------------------------------------------------------------------------
    def _make_node(self, rows, depth):
        node = Node(rows, depth)
        node.counts = np.bincount(self.codes[rows], minlength=self.K)
        n = len(rows)
        node.leaf_ll = self.ll_const + gammaln(node.counts + self.a).sum() - gammaln(n + self.K * self.a)
        if n < 2 * self.m:
            node.lo = node.hi = np.zeros(self.bins.shape[1], np.int64)
        elif self.m == 1:
            b = self.bins[rows]
            node.lo, node.hi = b.min(0), b.max(0)
        else:
            s = np.sort(self.bins[rows], axis=0)
            node.lo, node.hi = s[self.m - 1], s[n - self.m]
        node.width = np.maximum(node.hi - node.lo, 0)
        node.n_valid = int(np.count_nonzero(node.width))
        node.can_split = depth < self.max_depth and node.n_valid > 0
        return node

    @staticmethod
    def _splittable(node):
        return node.can_split

    @staticmethod
    def _log_rule_prob(node, feature, cut):
        if not (node.lo[feature] <= cut < node.hi[feature]):
            return -math.inf
        return -math.log(node.n_valid) - math.log(node.width[feature])

    def _draw_rule(self, node):
        valid = np.flatnonzero(node.width)
        feature = int(valid[self.rng.integers(len(valid))])
        cut = int(node.lo[feature] + self.rng.integers(node.width[feature]))
        return feature, cut

    def _build(self, rows, depth, template):
        """A subtree on ``rows`` with the shape and rules of ``template`` (a nested tuple
        ``None`` for a leaf or ``(feature, cut, left, right)``)."""
        node = self._make_node(rows, depth)
        if template is not None:
            f, c, lt, rt = template
            go_left = self.bins[rows, f] <= c
            node.feature, node.cut = f, c
            node.left = self._build(rows[go_left], depth + 1, lt)
            node.right = self._build(rows[~go_left], depth + 1, rt)
        return node

    @staticmethod
    def _template(node):
        if not node.is_split:
            return None
        return (node.feature, node.cut, NumpyCGM._template(node.left), NumpyCGM._template(node.right))

    # -- log prior / likelihood of a subtree --------------------------------------------------------
    def _subtree_lik(self, node):
        if not node.is_split:
            return node.leaf_ll
        return self._subtree_lik(node.left) + self._subtree_lik(node.right)

    def _subtree_prior(self, node):
        can = self._splittable(node)
        p = self.p_split[node.depth]
        if not node.is_split:
            return math.log1p(-p) if can else 0.0
        if not can:
            return -math.inf
        rule = self._log_rule_prob(node, node.feature, node.cut)
        if rule == -math.inf:
            return -math.inf
        return math.log(p) + rule + self._subtree_prior(node.left) + self._subtree_prior(node.right)

    # -- move targets ------------------------------------------------------------------------------
    def _targets(self):
        """Lists of (node, parent) targets of grow, prune, change, swap."""
        grow, prune, change, swap = [], [], [], []
        stack = [(self.root, None)]
        while stack:
            node, parent = stack.pop()
            if node.is_split:
                change.append((node, parent))
                if parent is not None:
                    swap.append((node, parent))
                if not node.left.is_split and not node.right.is_split:
                    prune.append((node, parent))
                stack.append((node.left, node))
                stack.append((node.right, node))
            elif self._splittable(node):
                grow.append((node, parent))
        return grow, prune, change, swap

    def _log_move_probs(self, counts):
        w = self.move_probs * (np.asarray(counts) > 0)
        with np.errstate(divide="ignore"):
            return np.log(w) - math.log(w.sum())

    def _replace(self, parent, old, new):
        if parent is None:
            self.root = new
        elif parent.left is old:
            parent.left = new
        else:
            parent.right = new

    # -- one MH step -----------------------------------------------------------------------------
    def step(self):
        targets = self._targets()
        counts = [len(t) for t in targets]
        log_p = self._log_move_probs(counts)
        move = min(int(np.searchsorted(np.cumsum(np.exp(log_p)), self.rng.random(), side="right")), 3)
        while counts[move] == 0:  # guard against round-off at the boundary
            move -= 1
        node, parent = targets[move][self.rng.integers(counts[move])]
        self.n_proposed[move] += 1

        rule_new = rule_old = 0.0
        if move == 0:  # grow
            f, c = self._draw_rule(node)
            rule_new = self._log_rule_prob(node, f, c)
            old, new = node, self._build(node.rows, node.depth, (f, c, None, None))
        elif move == 1:  # prune
            rule_old = self._log_rule_prob(node, node.feature, node.cut)
            old = node
            new = self._make_node(node.rows, node.depth)
        elif move == 2:  # change
            f, c = self._draw_rule(node)
            rule_new = self._log_rule_prob(node, f, c)
            rule_old = self._log_rule_prob(node, node.feature, node.cut)
            _, _, lt, rt = self._template(node)
            old, new = node, self._build(node.rows, node.depth, (f, c, lt, rt))
        else:  # swap the rule of `node` with its parent's (and the sibling's if it has the same rule)
            child, par = node, parent
            sib = par.right if par.left is child else par.left
            same = sib.is_split and sib.feature == child.feature and sib.cut == child.cut
            ct = self._template(child)
            new_child = (par.feature, par.cut, ct[2], ct[3])
            st = self._template(sib)
            new_sib = (par.feature, par.cut, st[2], st[3]) if same else st
            if par.left is child:
                tmpl = (child.feature, child.cut, new_child, new_sib)
            else:
                tmpl = (child.feature, child.cut, new_sib, new_child)
            grand = self._parent_of(par)
            old, new, parent = par, self._build(par.rows, par.depth, tmpl), grand

        d_prior = self._subtree_prior(new) - self._subtree_prior(old)
        if d_prior == -math.inf:  # an empty child or an invalid rule: prior 0, reject
            return move, False
        d_lik = self._subtree_lik(new) - self._subtree_lik(old)

        self._replace(parent, old, new)
        counts_new = [len(t) for t in self._targets()]
        log_p_new = self._log_move_probs(counts_new)
        rev = _REVERSE[move]
        log_q_fwd = log_p[move] - math.log(counts[move]) + rule_new
        if counts_new[rev] > 0:
            log_q_rev = log_p_new[rev] - math.log(counts_new[rev]) + rule_old
        else:
            log_q_rev = -math.inf
        log_r = d_lik + d_prior + log_q_rev - log_q_fwd
        if math.log(self.rng.random()) < log_r:
            self.log_lik += d_lik
            self.log_prior += d_prior
            self.n_accepted[move] += 1
            return move, True
        self._replace(parent, new, old)
        return move, False

    def _parent_of(self, target):
        stack = [(self.root, None)]
        while stack:
            node, parent = stack.pop()
            if node is target:
                return parent
            if node.is_split:
                stack.append((node.left, node))
                stack.append((node.right, node))
        raise RuntimeError("node not in tree")

    def run(self, num_iterations, callback=None):
        for _ in range(num_iterations):
            self.step()
            if callback is not None:
                callback(self)

    # -- export ---------------------------------------------------------------------------------
    def n_leaves(self):
        def rec(n):
            return rec(n.left) + rec(n.right) if n.is_split else 1

        return rec(self.root)

    def to_string(self, thresholds):
        """The tree in :func:`bdtree_jax.tree.to_string`'s grammar."""
        from bdtree_jax.tree import _fmt

        def rec(n):
            if not n.is_split:
                return "L"
            return f"x{n.feature}<={_fmt(thresholds[n.feature, n.cut])}({rec(n.left)},{rec(n.right)})"

        return rec(self.root)


def check_against_exact(num_iterations=100_000, seed=0, verbose=True):
    """Visited-tree frequencies of :class:`NumpyCGM` vs :func:`bdtree_jax.exact.enumerate_posterior`.

    6 rows, 2 features with 3 distinct values each, 2 classes, max_depth 2, beta 0.5: 33 trees.  Returns the total-variation
    distance between the empirical and exact tree distributions.
    """
    from collections import Counter

    from bdtree_jax.data import make_split_grid
    from bdtree_jax.exact import enumerate_posterior
    from bdtree_jax.likelihoods import DirichletMultinomial
    from bdtree_jax.priors import TreePrior

    X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 2.0], [1.0, 0.0], [2.0, 1.0], [2.0, 2.0]])
    y = np.array([0, 0, 1, 1, 0, 1])
    prior = TreePrior(max_depth=2, alpha=0.95, beta=0.5, min_leaf_size=1)
    lik = DirichletMultinomial(2, 1.0)
    exact = enumerate_posterior(X, lik.point_stats(y), prior, lik)
    grid = make_split_grid(X)
    sampler = NumpyCGM(grid.bin(X), y, 2, concentration=1.0, max_depth=2, alpha=0.95, beta=0.5, seed=seed)
    visits = Counter()
    burn = 1000
    sampler.run(burn)
    t0 = time.perf_counter()
    for _ in range(num_iterations):
        sampler.step()
        visits[sampler.to_string(grid.thresholds)] += 1
    seconds = time.perf_counter() - t0
    unknown = set(visits) - set(exact)
    assert not unknown, f"sampler visited trees outside the prior support: {sorted(unknown)[:5]}"
    tv = 0.5 * sum(abs(visits[k] / num_iterations - p) for k, p in exact.items())
    # Also check the cached log prior / likelihood against a from-scratch recomputation.
    assert np.isclose(sampler.log_lik, sampler._subtree_lik(sampler.root))
    assert np.isclose(sampler.log_prior, sampler._subtree_prior(sampler.root))
    if verbose:
        print(f"{len(exact)} trees in the support; {num_iterations} iterations in {seconds:.1f} s; "
              f"acceptance by move {dict(zip(MOVES, np.round(sampler.n_accepted / np.maximum(sampler.n_proposed, 1), 3)))}")
        top = sorted(exact.items(), key=lambda kv: -kv[1])[:8]
        print(f"{'tree':45s} {'exact':>8s} {'numpy':>8s}")
        for k, p in top:
            print(f"{k:45s} {p:8.4f} {visits[k] / num_iterations:8.4f}")
        iid = np.random.default_rng(seed).multinomial(num_iterations, list(exact.values())) / num_iterations
        tv_iid = 0.5 * np.abs(iid - np.array(list(exact.values()))).sum()
        print(f"total variation distance: {tv:.4f} (an iid sample of the same size from the exact "
              f"posterior: {tv_iid:.4f}; MCMC autocorrelation makes ours larger)")
    return tv


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tv = check_against_exact(args.iterations, args.seed)
    ok = tv < 0.03
    print("PASS" if ok else "FAIL", f"(threshold 0.03)")
    raise SystemExit(0 if ok else 1)
