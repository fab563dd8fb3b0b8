import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bdtree_jax.data import make_split_grid
from bdtree_jax.tree import (
    Tree,
    active_nodes,
    change,
    empty_tree,
    from_string,
    grow,
    leaf_index,
    leaf_nodes,
    n_leaves,
    nog_nodes,
    plot_tree,
    prune,
    swap,
    to_string,
    tree_depth,
    tree_summaries,
    tree_text,
)

THRESH = np.array([[0.5, 1.5, 2.5], [10.0, 20.0, np.inf]])


def _example():
    t = empty_tree(3)
    t = grow(t, 0, 0, 1)  # x0 <= 1.5
    t = grow(t, 2, 1, 0)  # right child: x1 <= 10
    t = grow(t, 5, 0, 2)  # x0 <= 2.5
    return t


def test_grammar_and_round_trip():
    t = _example()
    s = to_string(t, THRESH)
    assert s == "x0<=1.5(L,x1<=10(x0<=2.5(L,L),L))"
    back = from_string(s, THRESH, 3)
    for a, b in zip(back, t):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert to_string(empty_tree(2), THRESH) == "L"
    with pytest.raises(ValueError):
        from_string(s, THRESH, 1)


def test_structure_queries():
    t = _example()
    assert int(n_leaves(t)) == 4
    assert int(tree_depth(t)) == 3
    np.testing.assert_array_equal(np.where(np.asarray(leaf_nodes(t)))[0], [1, 6, 11, 12])
    np.testing.assert_array_equal(np.where(np.asarray(nog_nodes(t)))[0], [5])
    assert np.asarray(active_nodes(t)).sum() == 7


def test_grow_prune_inverse_and_canonical_slots():
    t = _example()
    pruned = prune(t, 5)
    regrown = grow(pruned, 5, 0, 2)
    for a, b in zip(regrown, t):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(pruned.feature[5]) == 0 and int(pruned.cut[5]) == 0


def test_change_and_swap():
    t = _example()
    c = change(t, 2, 0, 0)
    assert to_string(c, THRESH) == "x0<=1.5(L,x0<=0.5(x0<=2.5(L,L),L))"
    s = swap(t, 5)  # parent 2 (x1<=10) <-> child 5 (x0<=2.5)
    assert to_string(s, THRESH) == "x0<=1.5(L,x0<=2.5(x1<=10(L,L),L))"
    assert to_string(swap(s, 5), THRESH) == to_string(t, THRESH)
    # both children share a rule: the parent swaps with both
    u = grow(grow(grow(empty_tree(2), 0, 0, 1), 1, 1, 0), 2, 1, 0)
    su = swap(u, 1)
    assert to_string(su, THRESH) == "x1<=10(x0<=1.5(L,L),x0<=1.5(L,L))"


def test_leaf_index_matches_thresholds():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 4, size=(50, 2)).astype(float)
    X[:, 1] *= 10
    grid = make_split_grid(X)
    t = Tree(*(jnp.asarray(a) for a in from_string("x0<=1.5(L,x1<=15(x0<=2.5(L,L),L))", grid.thresholds, 3)))
    leaf = np.asarray(leaf_index(t, jnp.asarray(grid.bin(X))))
    expect = np.where(
        X[:, 0] <= 1.5, 1, np.where(X[:, 1] <= 15, np.where(X[:, 0] <= 2.5, 11, 12), 6)
    )
    np.testing.assert_array_equal(leaf, expect)
    # jit + vmap over a stack of trees gives the same
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), t)
    out = jax.jit(jax.vmap(leaf_index, in_axes=(0, None)))(stacked, jnp.asarray(grid.bin(X)))
    np.testing.assert_array_equal(np.asarray(out[1]), expect)


def test_text_and_plot():
    t = _example()
    text = tree_text(t, THRESH, ["a", "b"])
    assert text.splitlines()[0] == "a <= 1.5" and "b > 10" in text
    ax = plot_tree(t, THRESH, ["a", "b"])
    labels = [x.get_text() for x in ax.texts]
    assert "a <= 1.5" in labels and labels.count("leaf") == 4


def test_tree_summaries_match_n_leaves_and_depth():
    """The driver's vectorized per-block summaries equal n_leaves / tree_depth tree by tree,
    including non-canonical arrays (split flags below leaves, which must be ignored)."""
    rng = np.random.default_rng(0)
    is_split = rng.random((3, 40, 31)) < 0.55
    count, depth = tree_summaries(jnp.asarray(is_split))
    zeros = jnp.zeros(31, jnp.int32)
    expected = [[(int(n_leaves(Tree(jnp.asarray(s), zeros, zeros))), int(tree_depth(Tree(jnp.asarray(s), zeros, zeros))))
                 for s in chain] for chain in is_split]
    np.testing.assert_array_equal(np.stack([np.asarray(count), np.asarray(depth)], -1), np.array(expected))
    assert len(set(np.asarray(depth).ravel())) > 2  # the draws cover several depths
