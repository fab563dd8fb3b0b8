"""The host driver: runs any kernel for many chains in jitted blocks.

* Chains are ``vmap``-ped and placed across the available devices with ``jax.shard_map`` over a
  one-axis mesh ``("chain",)``; each device runs its share of chains with no communication.
* Iteration ``t`` of chain ``c`` uses the key ``fold_in(fold_in(seed_key, c), t)``, so draws do not
  depend on the number of chains, devices or the block size, and a resumed run equals an
  uninterrupted one.
* Iterations run in fixed-size blocks (a loop of up to ``block_size`` steps writing into the
  block's trace buffers; the last block stops early), so the number of iterations is not part of
  the compiled shape: one compilation serves any run length.
* Between blocks the host updates a tqdm progress bar and, if asked, writes a checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from .kernels.base import SamplingAlgorithm
from .tree import tree_summaries

__all__ = ["ChainPlan", "plan_chains", "run_chains", "run_independent", "trace_count", "chain_devices", "clear_compiled"]

_TRACES = {"count": 0}


def trace_count() -> int:
    """How many times a block program has been traced in this process (tests use it)."""
    return _TRACES["count"]


def chain_devices(num_chains: int, devices=None) -> list:
    """The devices chains are spread over: the most devices (of ``devices``, default all) that
    divide ``num_chains`` evenly."""
    devices = list(jax.devices() if devices is None else devices)
    n = max(d for d in range(1, len(devices) + 1) if num_chains % d == 0)
    return devices[:n]


CHAIN_METHODS = ("sequential", "vectorized")

#: Default iterations per compiled block of :func:`run_chains` and :func:`sample`.
BLOCK_SIZE = 500
#: :func:`sample`'s default block for ``method="cgm"``: a step takes microseconds, so a block of
#: 500 returned to the host every few milliseconds and the host's share of a run was measurable.
CGM_BLOCK_SIZE = 2000


def _default_chain_method(devices) -> str:
    """``"sequential"`` on CPU devices, ``"vectorized"`` on accelerators."""
    return "sequential" if devices[0].platform == "cpu" else "vectorized"


class ChainPlan(NamedTuple):
    """How a run's chains share the devices, decided once per run by :func:`plan_chains`.

    devices : tuple of the devices the chains are spread over (their number divides the chains).
    chain_method : ``"sequential"`` (chains of a device looped with ``lax.map``) or
        ``"vectorized"`` (``vmap``-ped).  Kernels that have a per-chain variant (tempered rungs,
        incremental scores) are built for this value.
    """

    devices: tuple
    chain_method: str


def plan_chains(num_chains: int, devices=None, chain_method: str | None = None) -> ChainPlan:
    """Decide how ``num_chains`` chains share the devices.

    devices : devices to spread chains over (default: all; see :func:`chain_devices`).
    chain_method : ``"sequential"`` or ``"vectorized"``; default ``"sequential"`` on CPU devices,
        ``"vectorized"`` on accelerators.  Anything else raises ``ValueError``.
    """
    if chain_method is not None and chain_method not in CHAIN_METHODS:
        raise ValueError(f"chain_method must be one of {CHAIN_METHODS}; got {chain_method!r}.")
    if num_chains < 1:
        raise ValueError(f"num_chains must be >= 1; got {num_chains}.")
    chosen = tuple(chain_devices(num_chains, devices))
    return ChainPlan(chosen, chain_method if chain_method is not None else _default_chain_method(chosen))


def _block_program(algorithm: SamplingAlgorithm, block_size: int, devices: tuple, chain_method: str):
    """Jitted ``(chain_keys, states, data, start, n_valid) -> (states, traces)``.

    Within a device, chains are either ``vmap``-ped (``"vectorized"``: one batched program, best on
    GPUs) or looped with ``lax.map`` (``"sequential"``: every chain runs the same scalar program, so
    draws are bit-identical whatever the number of chains per device, and a move only pays for
    its own branch).
    """

    def one_chain(chain_key, state, data, start, n_valid):
        # The block's step keys in one vectorized call (hashing a key per step inside the loop
        # costs more than the rest of a cheap step on CPU).
        steps = jnp.arange(block_size)
        keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(chain_key, start + steps)
        if algorithm.draw is not None:
            keys = jax.vmap(algorithm.draw)(keys)

        def record(state, key):
            new_state, info = algorithm.step(key, state, data)
            return new_state, algorithm.trace(new_state, info)

        # A loop of n_valid steps (the last block is short) writing into the block's trace
        # buffers: no per-step mask over the state; the buffers' tail is dropped by the host.
        # ``steps_per_pass`` steps per pass, then the remaining ones one by one.
        shapes = jax.eval_shape(record, state, jax.tree.map(lambda k: k[0], keys))[1]
        buffers = jax.tree.map(lambda a: jnp.zeros((block_size,) + a.shape, a.dtype), shapes)
        per_pass = max(1, int(algorithm.steps_per_pass))

        def steps_from(i, count, carry):
            state, buffers = carry
            outs = []
            for r in range(count):
                state, out = record(state, jax.tree.map(lambda k: k[i + r], keys))
                outs.append(out)
            outs = jax.tree.map(lambda *xs: jnp.stack(xs), *outs)
            return state, jax.tree.map(lambda b, o: jax.lax.dynamic_update_slice_in_dim(b, o, i, 0), buffers, outs)

        carry, done = (state, buffers), 0
        if per_pass > 1:
            carry = jax.lax.fori_loop(0, n_valid // per_pass,
                                      lambda j, c: steps_from(j * per_pass, per_pass, c), carry)
            done = n_valid - n_valid % per_pass
        state, traces = jax.lax.fori_loop(done, n_valid, lambda i, c: steps_from(i, 1, c), carry)
        return state, _with_tree_summaries(traces)

    def block(chain_keys, states, data, start, n_valid):
        _TRACES["count"] += 1
        if chain_method == "vectorized":
            return jax.vmap(one_chain, in_axes=(0, 0, None, None, None))(chain_keys, states, data, start, n_valid)
        return jax.lax.map(lambda args: one_chain(args[0], args[1], data, start, n_valid), (chain_keys, states))

    if len(devices) > 1:
        mesh = Mesh(np.array(devices), ("chain",))
        block = jax.shard_map(
            block,
            mesh=mesh,
            in_specs=(P("chain"), P("chain"), P(), P(), P()),
            out_specs=P("chain"),
            # chains never communicate; the varying-axis check trips over lax.switch under vmap
            check_vma=False,
        )
    return jax.jit(block)


_PROGRAMS: dict = {}


def clear_compiled() -> None:
    """Forget every compiled sampler program (the driver's block programs, SMC's runs and JAX's
    own caches) so their memory is released; the next run compiles again.

    Each XLA CPU executable holds memory mappings of its own: a long session that compiles
    thousands of distinct programs (many configurations or data shapes in one notebook, a test
    suite) can reach the kernel's ``vm.max_map_count`` (65,530 by default on Linux), after which
    the next compilation crashes the process.  Call this between unrelated fits in such sessions.
    """
    from .kernels import smc

    _PROGRAMS.clear()
    smc.compiled_run.cache_clear()
    jax.clear_caches()


def _get_program(kind: str, algorithm: SamplingAlgorithm, block_size: int, devices: tuple, builder):
    # Programs are cached on the algorithm's fields (functions closing over the static config, and
    # steps_per_pass), so repeated runs with the same configuration reuse one compiled executable.
    key = (kind, *algorithm, block_size, devices)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = builder()
    return _PROGRAMS[key]


def _fingerprint(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, (np.ndarray, jax.Array)):
            a = np.asarray(p)
            h.update(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
        else:
            h.update(repr(p).encode())
    return h.hexdigest()


def run_chains(
    algorithm: SamplingAlgorithm,
    data,
    *,
    key: jax.Array,
    num_chains: int,
    num_iterations: int,
    block_size: int = BLOCK_SIZE,
    progress: bool | None = None,
    checkpoint: str | os.PathLike | None = None,
    fingerprint: Any = None,
    devices=None,
    chain_method: str | None = None,
    description: str = "sampling",
    plan: ChainPlan | None = None,
) -> tuple[dict, Any]:
    """Run ``num_chains`` chains of ``algorithm`` for ``num_iterations`` iterations.

    Parameters
    ----------
    algorithm : SamplingAlgorithm
    data : pytree of arrays passed to every step (never closed over).
    key : typed PRNG key of the run.
    num_chains, num_iterations : int
    block_size : iterations per compiled block (a static shape; the run length is not).
    progress : show a tqdm bar; default: only when stderr is a terminal.
    checkpoint : path of a checkpoint file.  Written after every block; if it exists and belongs
        to the same run (same algorithm config, data, key, chains, length), sampling resumes
        from it and the result equals an uninterrupted run.
    fingerprint : anything whose ``repr`` identifies the configuration (part of the checkpoint
        identity).
    devices : devices to spread chains over (default: all; see :func:`chain_devices`).
    chain_method : how chains share a device: ``"sequential"`` (default on CPU; ``lax.map``) or
        ``"vectorized"`` (default on GPU; ``vmap``).  Either way the trees, moves and acceptances
        of chain ``c`` do not depend on the number of chains or devices; floating-point
        diagnostics (log-likelihood, log-prior) can differ in the last bit because XLA compiles
        a batch of one chain differently from a batch of several.
    plan : a :class:`ChainPlan` from :func:`plan_chains` (the caller's one decision, also used to
        build ``algorithm``); give either ``plan`` or ``devices``/``chain_method``, not both.

    Returns
    -------
    traces : dict of numpy arrays shaped ``(num_chains, num_iterations, ...)`` (trees as a
        :class:`~bdtree_jax.tree.Tree` of such arrays).
    states : the final states (pytree with a leading chain axis).
    """
    if num_chains < 1 or num_iterations < 1:
        raise ValueError(f"num_chains and num_iterations must be >= 1; got {num_chains}, {num_iterations}.")
    if plan is None:
        plan = plan_chains(num_chains, devices, chain_method)
    elif devices is not None or chain_method is not None:
        raise ValueError("give run_chains either plan or devices/chain_method, not both.")
    devices, chain_method = plan
    if num_chains % len(devices):
        raise ValueError(f"the plan's {len(devices)} devices do not divide num_chains={num_chains}.")
    block_size = int(min(block_size, max(num_iterations, 1)))
    chain_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(num_chains))
    ident = _fingerprint(
        fingerprint, jax.random.key_data(key), num_chains, num_iterations, *jax.tree.leaves(data)
    )

    init_fn = _get_program(
        "init", algorithm, 0, devices, lambda: jax.jit(jax.vmap(algorithm.init, in_axes=(0, None)))
    )
    block_fn = _get_program(
        ("block", chain_method), algorithm, block_size, devices,
        lambda: _block_program(algorithm, block_size, devices, chain_method),
    )

    # The traces go straight into arrays of the run's full length (allocated at the first block):
    # no per-block list and final concatenation, whose copy doubled the peak memory of long runs.
    start, traces, states = 0, None, None

    def fill(block, at):  # block: host arrays (chains, n, ...) -> traces[:, at:at + n]
        nonlocal traces
        if traces is None:
            traces = jax.tree.map(lambda a: np.empty((a.shape[0], num_iterations) + a.shape[2:], a.dtype), block)
        jax.tree.map(lambda dst, src: dst.__setitem__((slice(None), slice(at, at + src.shape[1])), src), traces, block)

    saved = _read_checkpoint(checkpoint, ident)
    if saved is not None:
        start = saved["start"]
        at = 0
        for chunk in saved["chunks"]:
            fill(chunk, at)
            at += jax.tree.leaves(chunk)[0].shape[1]
        states = _from_host(saved["states"])
    if states is None:
        states = init_fn(jax.vmap(jax.random.fold_in, in_axes=(0, None))(chain_keys, 2**31 - 1), data)
    if len(devices) > 1:
        sharding = jax.sharding.NamedSharding(Mesh(np.array(devices), ("chain",)), P("chain"))
        states = jax.device_put(states, sharding)
        chain_keys = jax.device_put(chain_keys, sharding)

    bar = _progress_bar(progress, num_iterations, start, description)

    def collect(out, at, n_valid):  # device -> host (blocks until that block has run)
        fill(jax.tree.map(lambda a: np.asarray(a)[:, :n_valid], out), at)
        bar.update(n_valid)

    pending = None
    try:
        while start < num_iterations:
            n_valid = min(block_size, num_iterations - start)
            # dispatch is asynchronous: the next block runs on the devices while the host copies
            # the previous one
            states, out = block_fn(chain_keys, states, data, jnp.int32(start), jnp.int32(n_valid))
            if pending is not None:
                collect(*pending)
            pending = (out, start, n_valid)
            start += n_valid
            if checkpoint is not None:
                collect(*pending)
                pending = None
                _write_checkpoint(checkpoint, ident, start, [jax.tree.map(lambda a: a[:, :start], traces)], states)
        if pending is not None:
            collect(*pending)
    finally:
        bar.close()
    return traces, states


def run_independent(
    run_one,
    data,
    *,
    key: jax.Array,
    num_chains: int,
    progress: bool | None = None,
    checkpoint: str | os.PathLike | None = None,
    fingerprint: Any = None,
    devices=None,
    jittable: bool = False,
    description: str = "sampling",
) -> Any:
    """Run ``num_chains`` independent runs of a non-MCMC method (SMC runs, exact PCFG draws):
    chain ``c`` is ``run_one(fold_in(key, c), data)``, so it does not depend on the number of
    chains, devices or on a resume.

    Parameters
    ----------
    run_one : ``(key, data) -> pytree`` of arrays, one chain's result.
    data : its second argument (a pytree of arrays when ``jittable``; any object otherwise).
    key : typed PRNG key of the run.
    num_chains : int >= 1.
    progress : show a tqdm bar over the chains; default: only when stderr is a terminal.
    checkpoint : path of a checkpoint file (the same format as :func:`run_chains`'s).  Written
        after every chain; if it exists and belongs to the same run (same ``fingerprint``, data,
        key and number of chains), the chains it holds are not run again and the result equals
        an uninterrupted run.
    fingerprint : anything whose ``repr`` identifies the configuration, including every option
        ``run_one`` closes over (part of the checkpoint identity).
    devices : devices to spread chains over when ``jittable`` (default: all; see
        :func:`chain_devices`).
    jittable : ``run_one`` can be traced by JAX (e.g. a ``jax.jit`` function).  With several
        devices the chains then run in waves of one chain per device (``shard_map``: one
        compiled program for all devices, no communication); each chain's program is the same
        as a lone call's, and the tests check that the results are bit-identical to the plain
        per-chain loop.  With one device, or when ``run_one`` is host-side (``False``), the
        chains run one after another in a plain loop.
    description : the progress bar's label.

    Returns
    -------
    The chains' results as host (numpy) arrays stacked with a leading ``(num_chains, ...)`` axis.
    """
    if not callable(run_one):
        raise TypeError(f"run_one must be a function (key, data) -> result; got {run_one!r}.")
    if isinstance(num_chains, bool) or not isinstance(num_chains, (int, np.integer)) or num_chains < 1:
        raise ValueError(f"num_chains must be an integer >= 1; got {num_chains!r}.")
    ident = _fingerprint("independent", fingerprint, jax.random.key_data(key), num_chains, *_data_leaves(data))
    saved = _read_checkpoint(checkpoint, ident)
    results = [] if saved is None else [_from_host(r, np.asarray) for r in saved["chunks"]]
    devices = tuple(chain_devices(num_chains, devices)) if jittable else ()
    wave_fn = _wave_program(run_one, devices) if len(devices) > 1 else None
    bar = _progress_bar(progress, num_chains, len(results), description)
    try:
        while len(results) < num_chains:
            first = len(results)
            if wave_fn is None:
                wave = [run_one(jax.random.fold_in(key, first), data)]
            else:  # one chain per device; after a resume the last wave repeats its last chain
                chains = jnp.minimum(first + jnp.arange(len(devices)), num_chains - 1)
                out = jax.device_get(wave_fn(jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, chains), data))
                n = min(len(devices), num_chains - first)
                wave = [jax.tree.map(lambda a, i=i: a[i], out) for i in range(n)]
            for one in wave:
                results.append(jax.device_get(one))
                bar.update(1)
                if checkpoint is not None:
                    _write_checkpoint(checkpoint, ident, len(results), [_to_host(r) for r in results], None)
    finally:
        bar.close()
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *results)


def _wave_program(run_one, devices: tuple):
    """Jitted ``(keys (D,), data) -> results (D, ...)``: chain ``keys[d]`` runs ``run_one`` alone
    on device ``d``."""

    def build():
        def one_per_device(keys, data):  # keys: this device's (1,) share
            return jax.tree.map(lambda a: a[None], run_one(keys[0], data))

        mesh = Mesh(np.array(devices), ("chain",))
        return jax.jit(jax.shard_map(one_per_device, mesh=mesh, in_specs=(P("chain"), P()),
                                     out_specs=P("chain"), check_vma=False))

    key = ("independent", run_one, devices)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = build()
    return _PROGRAMS[key]


def _data_leaves(data) -> list:
    """The leaves identifying ``data`` in a checkpoint: a pytree's arrays, or a dataclass's fields
    (e.g. PCFG's grammar), whose ``repr`` would elide large arrays."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return [getattr(data, f.name) for f in dataclasses.fields(data)]
    return jax.tree.leaves(data)


def _with_tree_summaries(chunk: dict) -> dict:
    """Add ``n_leaves`` and ``depth`` (iterations,) to a block's traces that record trees but not
    these: one vectorized pass over the block's trees after its step loop instead of a
    computation in every step."""
    tree = chunk.get("tree") if isinstance(chunk, dict) else None
    if tree is None or ("n_leaves" in chunk and "depth" in chunk):
        return chunk
    n_leaf, depth = tree_summaries(tree.is_split)
    return {**chunk, "n_leaves": n_leaf, "depth": depth}


def _progress_bar(progress: bool | None, total: int, initial: int, description: str):
    """A tqdm bar over ``total`` units; ``progress=None``: shown only when stderr is a terminal."""
    from tqdm.auto import tqdm

    if progress is None:
        progress = sys.stderr.isatty()
    return tqdm(total=total, initial=initial, disable=not progress, desc=description, leave=False)


def _to_host(tree):
    """A pytree as picklable numpy (typed PRNG keys, e.g. NUTS's, as their raw key data)."""
    leaves, treedef = jax.tree.flatten(tree)
    out = []
    for leaf in leaves:
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            out.append(("prng_key", str(jax.random.key_impl(leaf)), np.asarray(jax.random.key_data(leaf))))
        else:
            out.append(np.asarray(leaf))
    return treedef, out


def _from_host(saved, asarray=jnp.asarray):
    """The inverse of :func:`_to_host`; other leaves go through ``asarray`` (``np.asarray`` keeps
    them on the host with their dtype)."""
    treedef, leaves = saved
    restored = [
        jax.random.wrap_key_data(jnp.asarray(x[2]), impl=x[1]) if isinstance(x, tuple) else asarray(x)
        for x in leaves
    ]
    return jax.tree.unflatten(treedef, restored)


def _read_checkpoint(path, ident) -> dict | None:
    """The checkpoint at ``path`` if it exists and belongs to the run ``ident``, else None."""
    if path is None or not os.path.exists(path):
        return None
    with open(path, "rb") as fh:
        saved = pickle.load(fh)
    return saved if saved.get("ident") == ident else None


def _write_checkpoint(path, ident, start, chunks, states) -> None:
    """The one writer of checkpoints: ``start`` units done (iterations of :func:`run_chains`,
    chains of :func:`run_independent`), their results ``chunks`` and the states to go on from."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(
            dict(ident=ident, start=start, chunks=chunks, states=_to_host(states)),
            fh,
            protocol=pickle.HIGHEST_PROTOCOL,
        )
    os.replace(tmp, path)
