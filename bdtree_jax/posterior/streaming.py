"""Prediction over many draws and rows in bounded chunks.

Every posterior evaluates its draws at new rows one *chunk of draws x chunk of rows* at a time, so
the arrays a prediction builds (leaf indices, gathered leaf values, one-hot rows, sums over
trees) stay within :data:`PREDICT_BUDGET_BYTES` whatever the number of draws and rows; only a
method whose result is itself ``draws x rows`` (``predict_draws``, ``sample_function``,
``train_draws``, the pointwise groups of ``to_arviz``) holds that result in full.  Chunk shapes are
fixed per call (the last chunk of draws and of rows is padded), so each posterior compiles one
program per chunk shape.

The budget is read when a prediction starts: set ``bdtree_jax.posterior.streaming.PREDICT_BUDGET_BYTES``
to trade memory for fewer, larger programs (a budget below one draw x one row still works, a
cell at a time).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["PREDICT_BUDGET_BYTES", "MAX_DRAW_CHUNK", "plan", "rows_per_chunk", "draws_per_chunk", "row_blocks", "draw_blocks", "pad_rows",
           "normal_rows", "nbytes_per_draw"]

#: Bytes of temporaries one chunk of a prediction may hold (default 64 MiB): the chunk of draws
#: times the chunk of rows times the bytes a (draw, row) pair costs in that prediction.
PREDICT_BUDGET_BYTES = 64 * 2**20

#: Most draws evaluated together (more saves little dispatch and costs compile time).
MAX_DRAW_CHUNK = 256

#: Fewest rows per chunk the draw chunk is shrunk to keep (unless there are fewer rows).
_MIN_ROW_CHUNK = 1024


def plan(n_draws: int, n_rows: int, cell_bytes: int, *, max_draws: int = MAX_DRAW_CHUNK,
         budget: int | None = None) -> tuple[int, int]:
    """``(draw_chunk, row_chunk)`` for evaluating ``n_draws`` draws at ``n_rows`` rows when a
    (draw, row) pair costs ``cell_bytes`` bytes of temporaries: ``draw_chunk * row_chunk *
    cell_bytes <= budget`` (default :data:`PREDICT_BUDGET_BYTES`) unless one pair alone exceeds it.

    The draw chunk is as large as ``max_draws`` allows while a chunk of rows keeps at least 1,024
    rows; the row chunk then takes the rest of the budget, evened out over the chunks of rows so
    the last one carries little padding."""
    budget = PREDICT_BUDGET_BYTES if budget is None else budget
    n_draws, n_rows = max(int(n_draws), 1), max(int(n_rows), 1)
    cells = max(int(budget) // max(int(cell_bytes), 1), 1)
    draws = max(min(n_draws, int(max_draws), cells // min(n_rows, _MIN_ROW_CHUNK)), 1)
    return draws, rows_per_chunk(n_rows, draws, cell_bytes, budget=budget)


def rows_per_chunk(n_rows: int, draw_chunk: int, cell_bytes: int, *, budget: int | None = None) -> int:
    """Rows per chunk when ``draw_chunk`` draws are evaluated together at ``n_rows`` rows (the
    budget's share, evened out over the chunks; at least 1)."""
    budget = PREDICT_BUDGET_BYTES if budget is None else budget
    n_rows = max(int(n_rows), 1)
    rows = max(min(n_rows, int(budget) // max(int(draw_chunk) * int(cell_bytes), 1)), 1)
    return -(-n_rows // -(-n_rows // rows))


def draws_per_chunk(n_draws: int, n_rows: int, cell_bytes: int, *, max_draws: int = MAX_DRAW_CHUNK,
                    budget: int | None = None) -> int:
    """Draws per chunk when every chunk takes all ``n_rows`` rows at once (the pointwise
    log-likelihood, whose result is draws x rows anyway): ``draws * n_rows * cell_bytes <=
    budget`` down to one draw."""
    budget = PREDICT_BUDGET_BYTES if budget is None else budget
    fit = int(budget) // max(int(n_rows) * int(cell_bytes), 1)
    return max(min(max(int(n_draws), 1), int(max_draws), fit), 1)


def row_blocks(n_rows: int, row_chunk: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each chunk of ``row_chunk`` rows (the last may be shorter)."""
    return [(s, min(s + row_chunk, n_rows)) for s in range(0, n_rows, row_chunk)]


def pad_rows(a: np.ndarray, start: int, stop: int, row_chunk: int) -> np.ndarray:
    """Rows ``start:stop`` of ``a``, zero-padded to ``row_chunk`` rows (one program shape)."""
    part = np.asarray(a[start:stop])
    if len(part) == row_chunk:
        return part
    pad = np.zeros((row_chunk - len(part),) + part.shape[1:], part.dtype)
    return np.concatenate([part, pad])


def draw_blocks(idx: np.ndarray, draw_chunk: int):
    """Per chunk of the draws ``idx``: ``(kept, padded)``, the chunk's draws and the same padded
    to ``draw_chunk`` with its first draw (one program shape)."""
    for s in range(0, len(idx), draw_chunk):
        sel = idx[s : s + draw_chunk]
        yield sel, np.concatenate([sel, np.full(draw_chunk - len(sel), sel[0])])


def _uniform_bits_to_normal(bits):
    """``jax.random.normal``'s float32 transform of 32 random bits (``jax._src.random``)."""
    float_bits = jax.lax.shift_right_logical(bits, jnp.uint32(32 - 23)) | jnp.uint32(0x3F800000)
    floats = jax.lax.bitcast_convert_type(float_bits, jnp.float32) - jnp.float32(1.0)
    lo = np.nextafter(np.float32(-1.0), np.float32(0.0), dtype=np.float32)
    u = jax.lax.max(jnp.float32(lo), floats * (jnp.float32(1.0) - lo) + lo)
    return jnp.float32(np.sqrt(2)) * jax.lax.erf_inv(u)


def _partitionable_threefry(key) -> bool:
    return bool(jax.config.jax_threefry_partitionable) and "threefry" in str(jax.random.key_impl(key)).lower()


def normal_rows(key, start, n_rows: int, n_total: int, tail: tuple = ()):
    """Rows ``start : start + n_rows`` of ``jax.random.normal(key, (n_total,) + tail)``, float32,
    built from those rows' counters only (memory ``n_rows``, not ``n_total``) when JAX's
    threefry is partitionable (the default), where each element's bits depend on its flat index
    alone (and there are fewer than ``2**32`` of them); otherwise the full array is drawn and sliced.  ``start`` may be traced; rows past
    ``n_total`` (padding) hold normals of their own counters."""
    shape = (n_rows,) + tuple(tail)
    if not _partitionable_threefry(key) or (n_total + n_rows) * int(np.prod(tail, dtype=np.int64)) >= 2**32:
        full = jax.random.normal(key, (n_total,) + tuple(tail))
        full = jnp.concatenate([full, jnp.zeros(shape, full.dtype)])  # room for the padded rows
        return jax.lax.dynamic_slice_in_dim(full, start, n_rows, 0)
    width = int(np.prod(tail, dtype=np.int64))
    lo = jnp.asarray(start, jnp.uint32) * jnp.uint32(width) + jax.lax.iota(jnp.uint32, n_rows * width)
    hi = jnp.zeros_like(lo)  # counters below 2**32: the high word is 0
    k1, k2 = jax.random.key_data(key)
    from jax.extend.random import threefry2x32_p

    b1, b2 = threefry2x32_p.bind(k1, k2, hi, lo)
    return _uniform_bits_to_normal(b1 ^ b2).reshape(shape)


def nbytes_per_draw(arrays, n_chains: int, n_draws: int) -> int:
    """Bytes per kept draw of the ``(C, S, ...)`` arrays ``arrays`` (any iterable of arrays whose
    leading axes are chains and draws): their total ``nbytes`` over ``C * S``."""
    total = sum(int(np.asarray(a).nbytes) for a in arrays)
    return total // max(int(n_chains) * int(n_draws), 1)
