"""The host driver: runs any kernel for many chains in jitted blocks.

* Chains are ``vmap``-ped and placed across the available devices with ``jax.shard_map`` over a
  one-axis mesh ``("chain",)``; each device runs its share of chains with no communication.
* With ``data_shards > 1`` (:class:`ChainPlan`) the devices form a mesh ``("chain", "data")`` of
  ``groups x data_shards``: every chain's training rows are split over the ``data_shards`` devices
  of its group (the row axes of the data and state, :data:`ROW_AXES`, on ``"data"``), and XLA's
  SPMD partitioner inserts the all-reduces of the per-node sums; chain groups do not communicate.
  The devices may span several processes (``jax.distributed``; :func:`run_chains`).
* Iteration ``t`` of chain ``c`` uses the key ``fold_in(fold_in(seed_key, c), t)``, so draws do not
  depend on the number of chains, devices or the block size, and a resumed run equals an
  uninterrupted one.
* ``thin=k`` keeps every warm-up iteration and, after warm-up, every ``k``-th (iterations
  ``num_warmup + k - 1, num_warmup + 2k - 1, ...``): the others are stepped but never written,
  so the host traces hold ``num_warmup + (num_iterations - num_warmup) // k`` iterations.
* Iterations run in fixed-size blocks (a loop of up to ``block_size`` steps writing into the
  block's trace buffers; the last block stops early), so the number of iterations is not part of
  the compiled shape: one compilation serves any run length, and any ``num_warmup`` and ``thin``
  (arguments of the program).
* Between blocks the host updates a tqdm progress bar and, if asked, writes a checkpoint
  (resuming from one is logged: :func:`bdtree_jax._checkpoint._report_resume`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from ._checkpoint import (_fingerprint, _from_host, _host, _read_checkpoint, _report_resume, _to_host, _write_checkpoint,
                          run_ident)
from ._renamed import CHAIN_METHODS_RENAMED, renamed_value
from .kernels.base import SamplingAlgorithm
from .tree import tree_summaries
from ._validate import is_int

__all__ = ["ChainPlan", "plan_chains", "run_chains", "run_independent", "trace_count", "chain_devices", "clear_compiled",
           "ROW_AXES", "row_count", "row_specs", "recorded_count", "run_ident"]

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


CHAIN_METHODS = ("loop", "vmap")

#: Default iterations per compiled block of :func:`run_chains` and :func:`sample`.
BLOCK_SIZE = 500
#: :func:`sample`'s default block for ``method="cgm"``: a step takes microseconds, so a block of
#: 500 returned to the host every few milliseconds and the host's share of a run was measurable.
CGM_BLOCK_SIZE = 2000


def _default_chain_method(devices) -> str:
    """``"loop"`` on CPU devices, ``"vmap"`` on accelerators."""
    return "loop" if devices[0].platform == "cpu" else "vmap"


class ChainPlan(NamedTuple):
    """How a run's chains share the devices, decided once per run by :func:`plan_chains`.

    devices : tuple of the devices the run uses: ``groups * data_shards`` of them, ``groups``
        dividing the chains.  Group ``g`` is ``devices[g * data_shards:(g + 1) * data_shards]``.
    chain_method : ``"loop"`` (chains of a device looped with ``lax.map``) or ``"vmap"``
        (``vmap``-ped).  Kernels that have a per-chain variant (tempered rungs,
        incremental scores) are built for this value.
    data_shards : every chain's training rows are split over this many devices (1: each chain
        runs on one device with all its rows, the default).
    """

    devices: tuple
    chain_method: str
    data_shards: int = 1

    @property
    def groups(self) -> int:
        """The number of device groups the chains are spread over."""
        return len(self.devices) // self.data_shards

    def mesh(self) -> Mesh:
        """The ``(groups, data_shards)`` mesh with axes ``("chain", "data")``."""
        return Mesh(np.array(self.devices, dtype=object).reshape(self.groups, self.data_shards), ("chain", "data"))


def _check_data_shards(data_shards) -> int:
    if not is_int(data_shards) or data_shards < 1:
        raise ValueError(f"data_shards must be an integer >= 1; got {data_shards!r}.")
    return int(data_shards)


def plan_chains(num_chains: int, devices=None, chain_method: str | None = None, data_shards: int = 1) -> ChainPlan:
    """Decide how ``num_chains`` chains share the devices.

    devices : devices to spread chains over (default: all, ``jax.devices()``, which spans every
        process of a ``jax.distributed`` run; see :func:`chain_devices`).
    chain_method : ``"loop"`` or ``"vmap"``; default ``"loop"`` on CPU devices, ``"vmap"`` on
        accelerators (``"sequential"``, ``"vectorized"``: deprecated).  Else a ``ValueError``.
    data_shards : int >= 1 dividing the number of devices: the devices form groups of
        ``data_shards``, each chain's rows split over the devices of its group, the chains spread
        over the most groups that divide ``num_chains`` (:class:`ChainPlan`).  A ``ValueError``
        names ``data_shards`` when it is not a divisor of the devices.
    """
    chain_method = renamed_value("chain_method", chain_method, CHAIN_METHODS_RENAMED, stacklevel=3)
    if chain_method is not None and chain_method not in CHAIN_METHODS:
        raise ValueError(f"chain_method must be one of {CHAIN_METHODS}; got {chain_method!r}.")
    if num_chains < 1:
        raise ValueError(f"num_chains must be >= 1; got {num_chains}.")
    data_shards = _check_data_shards(data_shards)
    if data_shards == 1:
        chosen = tuple(chain_devices(num_chains, devices))
    else:
        devices = list(jax.devices() if devices is None else devices)
        if len(devices) % data_shards:
            raise ValueError(f"data_shards={data_shards} must divide the number of devices ({len(devices)}).")
        groups = max(g for g in range(1, len(devices) // data_shards + 1) if num_chains % g == 0)
        chosen = tuple(devices[:groups * data_shards])
    return ChainPlan(chosen, chain_method if chain_method is not None else _default_chain_method(chosen), data_shards)


#: The row axis of every field the driver shards over ``"data"`` when ``data_shards > 1``, by the
#: field's name (a NamedTuple field, dataclass field or dict key anywhere in the data or state
#: pytree): ``TreeData.bins (n, F)``, ``point_stats (n, S)``, ``sorted_bins``/``sorted_index``
#: ``(F, n)``, ``bin_onehot (n, F, B)``; ``BARTData.y (n,)`` and ``feature_bins (F, n)``; RJHMC's ``{"X": (n, F), "y": (n,)}``;
#: the states' ``leaf_id (..., n)`` (CGM, BART's ``(M, n)``, tempered rungs...) and BART's
#: ``fit (n,)``.  Negative axes count from the end (states carry leading chain, rung or tree
#: axes).  A field is sharded only when that axis has the data's ``n`` rows; every other array
#: (node statistics, trees, tables, keys) is replicated over ``"data"``.  A kernel that adds a
#: row-indexed field adds its name here; an unlisted one is correct, only replicated.
ROW_AXES = {"bins": 0, "point_stats": 0, "sorted_bins": 1, "sorted_index": 1, "bin_onehot": 0, "X": 0, "y": 0,
            "feature_bins": 1, "leaf_id": -1, "fit": -1}


def _field_name(path) -> str | None:
    """The innermost field name or dict key of a pytree path, or None."""
    for entry in reversed(path):
        name = getattr(entry, "name", None)
        if name is None:
            name = getattr(entry, "key", None)
        if isinstance(name, str):
            return name
    return None


def row_count(data) -> int | None:
    """The number of training rows ``n`` of a data pytree: the length of the row axis of its
    first field named ``bins``, ``X`` or ``y`` (:data:`ROW_AXES`), or None if it has none."""
    found = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(data)[0]:
        name = _field_name(path)
        if name in ("bins", "X", "y") and name not in found and np.ndim(leaf) > ROW_AXES[name]:
            found[name] = np.shape(leaf)[ROW_AXES[name]]
    for name in ("bins", "X", "y"):
        if name in found:
            return int(found[name])
    return None


def row_specs(tree, n: int, lead: tuple = ()):
    """A ``PartitionSpec`` for every leaf of ``tree`` (a pytree of arrays or shape structs): the
    row axis of the :data:`ROW_AXES` fields with ``n`` rows on ``"data"``, the leading axes
    ``lead`` (e.g. ``("chain",)`` for a state with a leading chain axis) as given, the rest
    replicated."""

    def spec(path, leaf):
        shape = np.shape(leaf)
        axes = [None] * len(shape)
        axes[:len(lead)] = lead
        name = _field_name(path)
        if name in ROW_AXES and len(shape) > len(lead):
            axis = ROW_AXES[name] % len(shape) if ROW_AXES[name] < 0 else ROW_AXES[name] + len(lead)
            if len(lead) <= axis < len(shape) and shape[axis] == n:
                axes[axis] = "data"
        return P(*axes)

    return jax.tree_util.tree_map_with_path(spec, tree)


def recorded_count(t, num_warmup, thin):
    """How many of the iterations ``[0, t)`` a run with ``thin`` records: every warm-up one, then
    every ``thin``-th (the last of each group of ``thin``).  Works on ints and int arrays (traced
    ones too: the block program takes ``num_warmup`` and ``thin`` as arguments)."""
    if all(isinstance(x, (int, np.integer)) for x in (t, num_warmup, thin)):
        return min(t, num_warmup) + max(t - num_warmup, 0) // thin
    if isinstance(thin, (int, np.integer)) and thin == 1:
        return t
    return jnp.minimum(t, num_warmup) + jnp.maximum(t - num_warmup, 0) // thin


def _block_program(algorithm: SamplingAlgorithm, block_size: int, plan: ChainPlan, shardings=None):
    """Jitted ``(chain_keys, states, data, start, n_valid, num_warmup, thin) -> (states, traces)``.

    Within a device, chains are either ``vmap``-ped (``"vmap"``: one batched program, best on
    GPUs) or looped with ``lax.map`` (``"loop"``: every chain runs the same scalar program, so
    draws are bit-identical whatever the number of chains per device, and a move only pays for
    its own branch).

    ``traces`` hold ``block_size`` slots per chain: iteration ``start + i`` writes slot
    ``recorded_count(start + i) - recorded_count(start)``, so with ``thin > 1`` an iteration that
    is not kept writes the slot of the next kept one, which overwrites it (the host reads only the
    slots of kept iterations).  ``num_warmup`` and ``thin`` are arguments, not constants: one
    program serves every ``thin``.  ``shardings`` (``data_shards > 1``): the ``(keys, states,
    data)`` NamedShardings of :func:`_run_shardings`.
    """
    devices, chain_method, data_shards = plan

    def one_chain(chain_key, state, data, start, n_valid, num_warmup, thin):
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
        first = recorded_count(start, num_warmup, thin)

        def steps_from(i, count, carry):
            state, buffers = carry
            for r in range(count):  # each step to its slot (in place: no copy of the buffers)
                state, out = record(state, jax.tree.map(lambda k: k[i + r], keys))
                slot = recorded_count(start + i + r, num_warmup, thin) - first
                buffers = jax.tree.map(lambda b, o: jax.lax.dynamic_update_index_in_dim(b, o, slot, 0), buffers, out)
            return state, buffers

        carry, done = (state, buffers), 0
        if per_pass > 1:
            carry = jax.lax.fori_loop(0, n_valid // per_pass,
                                      lambda j, c: steps_from(j * per_pass, per_pass, c), carry)
            done = n_valid - n_valid % per_pass
        state, traces = jax.lax.fori_loop(done, n_valid, lambda i, c: steps_from(i, 1, c), carry)
        return state, _with_tree_summaries(traces)

    def block(chain_keys, states, data, start, n_valid, num_warmup, thin):
        _TRACES["count"] += 1
        if chain_method == "vmap":
            return jax.vmap(one_chain, in_axes=(0, 0, None, None, None, None, None))(
                chain_keys, states, data, start, n_valid, num_warmup, thin)
        return jax.lax.map(lambda args: one_chain(args[0], args[1], data, start, n_valid, num_warmup, thin),
                           (chain_keys, states))

    if data_shards > 1:
        # the mesh ("chain", "data"): chain groups by shard_map (manual over "chain"), the rows
        # of each group's chains split over "data" by XLA's SPMD partitioner (automatic), which
        # turns the reductions over rows into per-shard partial sums and an all-reduce
        mesh = plan.mesh()
        if plan.groups > 1:
            block = jax.shard_map(block, mesh=mesh, in_specs=(P("chain"), P("chain"), P(), P(), P(), P(), P()),
                                  out_specs=P("chain"), axis_names=frozenset({"chain"}), check_vma=False)
        keys_sharding, state_shardings, data_shardings = shardings
        scalar = jax.sharding.NamedSharding(mesh, P())
        return jax.jit(block, in_shardings=(keys_sharding, state_shardings, data_shardings) + (scalar,) * 4,
                       out_shardings=(state_shardings, keys_sharding))
    if len(devices) > 1:
        mesh = Mesh(np.array(devices), ("chain",))
        block = jax.shard_map(
            block,
            mesh=mesh,
            in_specs=(P("chain"), P("chain"), P(), P(), P(), P(), P()),
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
    data_shards: int | None = None,
    num_warmup: int = 0,
    thin: int = 1,
    resume: dict | None = None,
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
    chain_method : how chains share a device: ``"loop"`` (default on CPU; ``lax.map``) or
        ``"vmap"`` (default on GPU).  Either way the trees, moves and acceptances
        of chain ``c`` do not depend on the number of chains or devices; floating-point
        diagnostics (log-likelihood, log-prior) can differ in the last bit because XLA compiles
        a batch of one chain differently from a batch of several.
    plan : a :class:`ChainPlan` from :func:`plan_chains` (the caller's one decision, also used to
        build ``algorithm``); give either ``plan`` or ``devices``/``chain_method``/``data_shards``,
        not both.
    data_shards : split every chain's rows over this many devices (:func:`plan_chains`; default
        1).  The data must have a row axis the driver knows (:data:`ROW_AXES`) whose length ``n``
        ``data_shards`` divides (no padding: a ``ValueError`` naming ``data_shards`` says so,
        before anything compiles).  Sums over rows are then added in another order, so floats
        (leaf values, ``sigma``, log-likelihoods) agree with the unsharded run to float32
        round-off and the trees are the same unless a Metropolis-Hastings decision falls within
        that round-off (the tests check 200 BART sweeps).  With ``jax.distributed`` the devices
        may span processes: every process calls :func:`run_chains` with the same arguments and
        the full ``data`` (each device receives only its own rows' shard), and every process
        gets the full traces.
    num_warmup : int in ``[0, num_iterations]``, default 0
        Iterations recorded whatever ``thin`` (only used with ``thin > 1``).
    thin : int >= 1, default 1
        After ``num_warmup`` keep every ``thin``-th iteration (``num_warmup + thin - 1``,
        ``num_warmup + 2 thin - 1`` ...); the others are never recorded.
    resume : None or ``{"start": t, "chunks": [traces], "states": states}``: go on from iteration
        ``t`` of this run (as a checkpoint does; a checkpoint file that belongs to the run wins):
        ``chunks`` hold its recorded iterations of ``[0, t)`` (``recorded_count(t, num_warmup,
        thin)`` of them, host arrays ``(num_chains, ., ...)``) and ``states`` the chains' states
        after iteration ``t - 1``.  The result equals an uninterrupted run.

    Returns
    -------
    traces : dict of numpy arrays shaped ``(num_chains, R, ...)`` with ``R = num_warmup +
        (num_iterations - num_warmup) // thin`` recorded iterations (``num_iterations`` when
        ``thin = 1``; trees as a :class:`~bdtree_jax.tree.Tree` of such arrays).
    states : the final states (pytree with a leading chain axis; device arrays, sharded like the
        run).
    """
    if num_chains < 1 or num_iterations < 1:
        raise ValueError(f"num_chains and num_iterations must be >= 1; got {num_chains}, {num_iterations}.")
    if not is_int(thin) or thin < 1:
        raise ValueError(f"thin must be an integer >= 1; got {thin!r}.")
    if not is_int(num_warmup) \
            or not 0 <= num_warmup <= num_iterations:
        raise ValueError(f"num_warmup must be an integer in [0, num_iterations={num_iterations}]; got {num_warmup!r}.")
    thin, num_warmup = int(thin), int(num_warmup)
    if plan is None:
        plan = plan_chains(num_chains, devices, chain_method, 1 if data_shards is None else data_shards)
    elif devices is not None or chain_method is not None or data_shards is not None:
        raise ValueError("give run_chains either plan or devices/chain_method/data_shards, not both.")
    devices, chain_method, data_shards = plan
    if len(devices) % data_shards or num_chains % (len(devices) // data_shards):
        raise ValueError(f"the plan's {len(devices) // data_shards} device groups do not divide num_chains={num_chains}.")
    if data_shards > 1:
        check_rows(data, data_shards)
    if jax.process_count() > 1 and data_shards == 1 and len(devices) > 1:
        raise ValueError("with several processes (jax.distributed) give data_shards > 1 (the mesh spans processes "
                         "only through it) or the devices of this process (devices=jax.local_devices()).")
    block_size = int(min(block_size, max(num_iterations, 1)))
    num_recorded = recorded_count(num_iterations, num_warmup, thin)
    chain_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(num_chains))  # keys: fold_in only
    ident = run_ident(fingerprint, jax.random.key_data(key), num_chains, num_iterations, data, num_warmup, thin, data_shards)
    init_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(chain_keys, 2**31 - 1)

    shardings = None
    if data_shards > 1:
        shardings = _run_shardings(plan, algorithm, init_keys, data)
        keys_sharding, _, data_shardings = shardings
        data = _put(data, data_shardings)
        init_keys, chain_keys = _put(init_keys, keys_sharding), _put(chain_keys, keys_sharding)
    # a sharded program is built for its shardings (the data's and state's structure and row specs)
    layout = None if shardings is None else (jax.tree.structure(shardings), tuple(jax.tree.leaves(shardings)))
    init_fn = _get_program(
        ("init", data_shards, layout), algorithm, 0, devices,
        lambda: jax.jit(jax.vmap(algorithm.init, in_axes=(0, None))) if shardings is None else jax.jit(
            jax.vmap(algorithm.init, in_axes=(0, None)), in_shardings=shardings[::2], out_shardings=shardings[1]),
    )
    block_fn = _get_program(
        ("block", chain_method, data_shards, layout), algorithm, block_size, devices,
        lambda: _block_program(algorithm, block_size, plan, shardings),
    )

    # The traces go straight into arrays of the run's full length (allocated at the first block):
    # no per-block list and final concatenation, whose copy doubled the peak memory of long runs.
    start, traces, states = 0, None, None

    def fill(block, at):  # block: host arrays (chains, n, ...) -> traces[:, at:at + n]
        nonlocal traces
        if traces is None:
            traces = jax.tree.map(lambda a: np.empty((a.shape[0], num_recorded) + a.shape[2:], a.dtype), block)
        jax.tree.map(lambda dst, src: dst.__setitem__((slice(None), slice(at, at + src.shape[1])), src), traces, block)

    saved = _read_checkpoint(checkpoint, ident)
    if saved is None and resume is not None:
        saved = resume  # a round of run_until going on: the file there is its previous round's
    else:
        _report_resume(checkpoint, saved, num_iterations, "iteration", num_chains)
    if saved is not None:
        start = saved["start"]
        at = 0
        for chunk in saved["chunks"]:
            fill(chunk, at)
            at += jax.tree.leaves(chunk)[0].shape[1]
        if shardings is None:
            states = _from_host(saved["states"])
        else:
            states = _put(_from_host(saved["states"], np.asarray), shardings[1])
    # a row-sharded program on CPU compiles afresh and is never saved (outside_compilation_cache)
    with outside_compilation_cache(data_shards > 1 and devices[0].platform == "cpu"):
        if states is None:
            states = init_fn(init_keys, data)
        if len(devices) > 1 and data_shards == 1:
            sharding = jax.sharding.NamedSharding(Mesh(np.array(devices), ("chain",)), P("chain"))
            states = jax.device_put(states, sharding)
            chain_keys = jax.device_put(chain_keys, sharding)

        bar = _progress_bar(progress, num_iterations, start, description)

        def collect(out, at, n_keep, n_valid):  # device -> host (blocks until that block has run)
            fill(jax.tree.map(lambda a: _host(a)[:, :n_keep], out), at)
            bar.update(n_valid)

        pending = None
        warmup, thin_arg = jnp.int32(num_warmup), jnp.int32(thin)
        try:
            while start < num_iterations:
                n_valid = min(block_size, num_iterations - start)
                # dispatch is asynchronous: the next block runs on the devices while the host copies
                # the previous one
                states, out = block_fn(chain_keys, states, data, jnp.int32(start), jnp.int32(n_valid), warmup, thin_arg)
                if pending is not None:
                    collect(*pending)
                at = recorded_count(start, num_warmup, thin)
                pending = (out, at, recorded_count(start + n_valid, num_warmup, thin) - at, n_valid)
                start += n_valid
                if checkpoint is not None:
                    collect(*pending)
                    pending = None
                    kept = recorded_count(start, num_warmup, thin)
                    _write_checkpoint(checkpoint, ident, start, [jax.tree.map(lambda a, k=kept: a[:, :k], traces)], states)
            if pending is not None:
                collect(*pending)
        finally:
            bar.close()
    return traces, states


@contextlib.contextmanager
def outside_compilation_cache(active: bool = True):
    """While active, programs compile afresh: JAX's persistent compilation cache (if the user set
    ``jax_compilation_cache_dir``) is neither read nor written; it is back on afterwards.

    :func:`run_chains` uses it for row-sharded runs on CPU (``data_shards > 1``): such a program
    loaded from the cache could abort the process inside its all-reduces (jax 0.10, XLA's CPU
    runtime; compiled afresh it runs).  Switching ``jax_enable_compilation_cache`` alone is not
    enough once the process has used the cache (JAX decides that once), so the cache's state is
    reset on entry and on exit (``jax.experimental.compilation_cache``'s ``reset_cache``).
    """
    if not active:
        yield
        return
    from jax.experimental.compilation_cache import compilation_cache

    was_enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was_enabled)
        compilation_cache.reset_cache()


def check_rows(data, data_shards: int, where: str = "") -> int:
    """The data's row count ``n`` (:func:`row_count`), checked for ``data_shards``: a
    ``ValueError`` naming ``data_shards`` when the data has no known row axis or ``n`` is not a
    multiple of ``data_shards`` (rows are not padded: a padded row would enter the sums over
    rows, e.g. BART's ``sigma2`` draw and the row counts of CGM98's valid cuts)."""
    n = row_count(data)
    if n is None:
        raise ValueError(f"{where}data_shards={data_shards}: the data has no row axis the driver can shard (a field "
                         f"named {sorted(ROW_AXES)}); this method cannot shard rows.")
    if n % data_shards:
        raise ValueError(f"{where}data_shards={data_shards} must divide the number of training rows (n={n}): rows are "
                         f"not padded; drop {n % data_shards} rows or choose a divisor of {n}.")
    return n


def _run_shardings(plan: ChainPlan, algorithm: SamplingAlgorithm, init_keys, data):
    """``(keys, states, data)`` NamedShardings of a run with ``data_shards > 1``: keys and the
    states' leading axis on ``"chain"``, the row axes (:func:`row_specs`) on ``"data"``."""
    mesh, n = plan.mesh(), row_count(data)

    def named(specs):
        return jax.tree.map(lambda s: jax.sharding.NamedSharding(mesh, s), specs, is_leaf=lambda x: isinstance(x, P))

    shapes = jax.eval_shape(jax.vmap(algorithm.init, in_axes=(0, None)), init_keys, data)
    return (jax.sharding.NamedSharding(mesh, P("chain")), named(row_specs(shapes, n, ("chain",))),
            named(row_specs(data, n)))


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _put(tree, shardings):
    """``tree`` placed on ``shardings`` (a sharding or a matching pytree of them).  A sharding that
    spans other processes' devices (``jax.distributed``) takes each local shard from this
    process's full copy of the value (every process passes the same value); typed PRNG keys travel
    as their key data."""
    if isinstance(shardings, jax.sharding.Sharding):
        shardings = jax.tree.map(lambda _: shardings, tree, is_leaf=_is_key)

    def put(x, sharding):
        if _is_key(x):
            return jax.random.wrap_key_data(put(jax.random.key_data(x), sharding), impl=jax.random.key_impl(x))
        if sharding.is_fully_addressable:
            return jax.device_put(x, sharding)
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree, shardings, is_leaf=_is_key)


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
    if not is_int(num_chains) or num_chains < 1:
        raise ValueError(f"num_chains must be an integer >= 1; got {num_chains!r}.")
    ident = _fingerprint("independent", fingerprint, jax.random.key_data(key), num_chains, *_data_leaves(data))
    saved = _read_checkpoint(checkpoint, ident)
    _report_resume(checkpoint, saved, num_chains, "chain", num_chains)
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
