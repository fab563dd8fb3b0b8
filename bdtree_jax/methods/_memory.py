"""A run's memory, estimated before anything is compiled, and compared with what is available.

:func:`check_run` is called by :meth:`~bdtree_jax.methods.Method.run` of every method (through
``Method._start``, the validation path of :func:`~bdtree_jax.sample` and of the estimators) once
the problem is built and checked.  It adds up what a run holds at its peak (:func:`estimate_run`):

* the **recorded trace**: the driver records every warm-up iteration and every kept one,
  ``num_chains x (num_warmup + num_samples) x bytes per draw`` (a draw is the padded tree,
  ``2**(max_depth+1) - 1`` slots of ``is_split``, ``feature`` and ``cut`` in their narrow types,
  and a few per-iteration scalars), plus the posterior's copy of the kept draws and the trace
  buffers of the compiled blocks in flight;
* the **chain states**: for every chain and tempering rung, the tree, every node's statistics
  and valid-cut bounds (``slots x (S + 2F)`` numbers) and every row's leaf (``rows`` int32); the
  particle methods hold ``num_particles`` such states per chain (twice, around resampling);
* the **step temporaries** XLA allocates while a step runs, of the same shapes (the node sums'
  scatter lanes, the re-routed rows), for as many chains as run at once (one at a time on CPU,
  all of a device's when the chains are vectorised);
* the **data arrays** the samplers read (:func:`data_bytes`: the problem's
  :class:`~bdtree_jax.data.TreeData` — ``bins`` ``(n, F)``, ``sorted_bins`` and ``sorted_index``
  ``(F, n)``, ``point_stats``, the one-hot bins ``bin_onehot`` ``(n, F, B <= 64)`` int32 when kept,
  ``bin_bits`` ... — and BART's residual arrays): a copy on every device that runs chains, and the
  host's training codes.

Every part is the arrays' exact byte count; their sum times :data:`XLA_FACTOR`, plus what
compiling takes (:data:`COMPILE_BYTES`), is the estimate, both measured by
``benchmarks/memory_bounds.py`` (``benchmarks/results/memory_bounds.md``) as the peak resident
memory of small runs.  The estimate is compared with the memory available
(:func:`available_bytes`: the host's ``MemAvailable`` and the cgroup's limit; on an accelerator
also the device's ``bytes_limit`` less what is in use).  A run that does not fit raises a
``ValueError`` naming its largest parts and the arguments that drive them, before compiling.
``BDTREE_MEMORY_CHECK=0`` in the environment turns the check off (docs/memory.md).
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple

import jax
import numpy as np

from ..kernels.cgm import CGMConfig
from ..tree import n_nodes

__all__ = ["XLA_FACTOR", "COMPILE_BYTES", "ENV_VAR", "compile_bytes", "Part", "estimate_run", "estimate_bart", "data_bytes", "available_bytes", "check_run", "check_bart", "format_bytes"]

#: The environment variable that turns the check off (``BDTREE_MEMORY_CHECK=0``).
ENV_VAR = "BDTREE_MEMORY_CHECK"
#: How much more than the arrays :func:`estimate_run` counts a run's peak resident memory grows
#: (XLA's temporaries, allocator slack, host copies of device buffers), beyond the compilation's
#: own memory (:data:`COMPILE_BYTES`): measured by ``benchmarks/memory_bounds.py`` on small runs
#: of every sampler (growth over the counted bytes after the compile allowance, 0.7 to 1.8; the
#: largest rounded up).
XLA_FACTOR = 2.0
#: What compiling a method's programs takes, measured with the same runs (the peak growth of a
#: run whose counted arrays are a few MB: about 0.3 GB; WU, whose restructure move unrolls a
#: program per heap level, grew 0.9, 1.4 and 1.8 GB at depths 6, 10 and 12 on iris with at most
#: 0.12 GB counted).  Methods not listed: ``"*"``.
COMPILE_BYTES = {"*": 512 * 2**20, "wu": 1792 * 2**20}


class Part(NamedTuple):
    """One part of a run's memory: ``what`` it is, its ``nbytes`` (counted, before
    :data:`XLA_FACTOR`), the arguments that drive it (``drivers``, in the order to lower them) and
    whether it lives on the accelerator (``device``) or on the host."""

    what: str
    nbytes: int
    drivers: tuple
    device: bool


def format_bytes(n: float) -> str:
    """``n`` bytes in MiB or GiB, e.g. ``"1.5 GiB"``."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def compile_bytes(method) -> int:
    """:data:`COMPILE_BYTES` of ``method``."""
    return COMPILE_BYTES.get(method.name, COMPILE_BYTES["*"])


def _slot_bytes(problem) -> int:
    """Bytes of one heap slot of a recorded tree: ``is_split`` and the narrow ``feature`` and
    ``cut`` types (plus the missing-value bit and level masks of general rules)."""
    n_cuts = int(problem.grid.n_cuts.max()) if problem.grid.n_cuts.size else 0
    dtypes = CGMConfig.from_prior(problem.prior, n_features=problem.data.bins.shape[1], n_cuts=n_cuts).trace_dtypes
    size = 1 + sum(np.dtype(t).itemsize for t in dtypes)
    if problem.data.missing_code is not None or problem.data.level_masks is not None:
        top = int(np.max(np.asarray(problem.grid.level_count), initial=0)) if problem.grid.level_count is not None else 0
        size += 1 + 4 * -(-top // 32)
    return size


def _state_bytes(problem, slots: int) -> int:
    """Bytes of one chain's (or particle's) state: the tree (bool + two int32 per slot), every
    node's statistics ``(N, S)`` float32 and bounds ``lo, hi`` ``(N, F)`` int32, every row's leaf
    ``(n,)`` int32."""
    n, n_features = problem.data.bins.shape
    n_stats = problem.data.point_stats.shape[1]
    return slots * (9 + 4 * n_stats + 8 * n_features) + 4 * n


def _step_bytes(problem, slots: int) -> int:
    """Bytes of one step's temporaries on one tree: the node sums' 16 scatter lanes
    ``(16, N, S)``, the bounds' ``(N, 2F)`` max-reduction and the proposed tree's copies of the
    state's node arrays, and a few ``(n,)`` int32 per row (leaf ids, re-routed rows, scatter
    slots)."""
    n, n_features = problem.data.bins.shape
    n_stats = problem.data.point_stats.shape[1]
    return slots * 4 * (16 * n_stats + 4 * n_features + 2 * n_stats) + 16 * n


def data_bytes(problem) -> tuple[int, int]:
    """``(device bytes, host bytes)`` of a built problem's data: every array of its ``data``
    (:class:`~bdtree_jax.data.TreeData`, or BART's ``BARTData`` with its TreeData), counted from
    the arrays themselves (their ``nbytes``: ``bins`` ``(n, F)`` int32, ``sorted_bins`` and
    ``sorted_index`` ``(F, n)`` int32, ``bin_onehot`` ``(n, F, B)`` int32 ...), and the host's
    training codes and statistics (``train_bins``, ``train_stats``)."""
    device = sum(int(a.nbytes) if hasattr(a, "nbytes") else np.asarray(a).nbytes for a in jax.tree.leaves(problem.data))
    host = sum(int(getattr(getattr(problem, k, None), "nbytes", 0)) for k in ("train_bins", "train_stats"))
    return device, host


def _data_parts(problem, copies: int) -> list:
    """The :class:`Part` s of :func:`data_bytes`: ``copies`` device copies, one host copy."""
    device, host = data_bytes(problem)
    drivers = ("rows",)
    return [Part(f"data arrays (bins, sorted_bins, one-hot bins ...; {copies} device copies)", copies * device,
                 drivers, True),
            Part("training codes on the host", host, drivers, False)]


def _devices(options) -> list:
    return list(options.devices) if options.devices is not None else jax.devices()


def estimate_run(method, problem, options, n_rungs: int = 1) -> list[Part]:
    """The parts of a run's peak memory (counted bytes, before :data:`XLA_FACTOR`).

    Parameters
    ----------
    method : Method, problem : TreeProblem, options : RunOptions.
    n_rungs : rungs of the tempering ladder (1: no tempering).

    Returns
    -------
    list of :class:`Part`, largest first.
    """
    name = method.name
    chains, samples = options.num_chains, options.num_samples
    if name.startswith("hmc-"):
        return sorted(_soft_parts(method, problem, options, n_rungs) + _data_parts(problem, 1), key=lambda p: -p.nbytes)
    if name == "pcfg":
        if method.unbounded:
            from ..pcfg.grammar import _MAX_HEAP_DEPTH as depth
        else:
            depth = problem.prior.max_depth
    else:
        depth = problem.prior.max_depth
    slots = n_nodes(depth)
    per_draw = slots * _slot_bytes(problem) + 32  # + log_lik, log_prior, n_leaves, depth, accepted, move
    state = _state_bytes(problem, slots)
    step = _step_bytes(problem, slots)
    devices = _devices(options)
    per_device = math.ceil(chains / max(1, len(devices)))
    on_cpu = devices[0].platform == "cpu"
    vectorized = options.chain_method == "vmap" or (options.chain_method is None and not on_cpu)
    # device parts are per device on an accelerator; on CPU every device shares the host's memory
    sharing = min(chains, len(devices)) if on_cpu else 1
    at_once = (per_device if vectorized else 1) * sharing  # chains whose step temporaries coexist
    depth_rows = ("max_depth", "rows")
    parts = []
    if method.runs_chains:  # MCMC: the driver records every warm-up and every kept iteration
        recorded = options.num_warmup + samples
        parts.append(Part(f"recorded trace ({chains} chains x {recorded:,} iterations x {per_draw:,} bytes per draw)",
                          chains * recorded * per_draw, ("num_samples", "num_chains", "num_warmup", "max_depth"),
                          False))
        parts.append(Part(f"the posterior's copy of the kept draws ({chains} x {samples:,} draws)",
                          chains * samples * per_draw, ("num_samples", "num_chains", "max_depth"), False))
        block = method.default_block_size if options.block_size is None else options.block_size
        block = min(block, options.num_warmup + samples * options.thin)
        # the block running on the device, the previous one's device and host copies
        parts.append(Part(f"trace buffers of the compiled blocks ({block:,} iterations each)",
                          3 * per_device * sharing * block * per_draw, ("block_size", "num_chains", "max_depth"), True))
        particles = getattr(method, "num_particles", 0) if name == "pg" else 0
        parts.append(Part(f"chain states ({chains} chains x {n_rungs} rungs)", per_device * sharing * n_rungs * state,
                          ("num_chains", "num_temperatures") + depth_rows, True))
        if particles:
            parts.append(Part(f"particles ({at_once} chains x {n_rungs} rungs x {particles} particles, twice "
                              "around resampling)", 2 * at_once * n_rungs * particles * state,
                              ("num_particles", "num_temperatures") + depth_rows, True))
        parts.append(Part(f"step temporaries ({at_once} chains x {n_rungs} rungs at once)",
                          at_once * n_rungs * max(1, particles) * step, depth_rows + ("num_particles",), True))
    elif name == "smc":
        particles = method.num_particles
        parts.append(Part(f"kept draws ({chains} x {samples:,} draws x {per_draw:,} bytes per draw)",
                          chains * samples * per_draw, ("num_samples", "num_chains", "max_depth"), False))
        parts.append(Part(f"final particles' trees ({chains} runs x {particles} particles)",
                          chains * particles * per_draw, ("num_particles", "num_chains", "max_depth"), False))
        parts.append(Part(f"particle systems ({sharing} runs at once x {particles} particles, twice around "
                          "resampling)", 2 * sharing * particles * (state + step), ("num_particles",) + depth_rows,
                          True))
    else:  # pcfg: the grammar checks its own memory as it is built; here its draws
        parts.append(Part(f"kept draws ({chains} x {samples:,} draws x {per_draw:,} bytes per draw)",
                          2 * chains * samples * per_draw, ("num_samples", "num_chains", "max_depth"), False))
    parts += _data_parts(problem, sharing)
    return sorted(parts, key=lambda p: -p.nbytes)


def _soft_parts(method, problem, options, n_rungs: int) -> list[Part]:
    """RJHMC's soft trees: ``2**max_depth - 1`` split slots of a threshold, a feature (or ``F``
    simplex weights) and leaf parameters per draw and per state, NUTS' few copies of them per
    chain, and every row's routing probabilities ``(n, leaves)`` float32 in a step."""
    n, n_features = problem.X.shape
    depth = min(problem.prior.max_depth, 10)  # deeper: RJHMC's own check refuses it
    splits, leaves = 2**depth - 1, 2**depth
    n_classes = len(problem.classes) if problem.classes is not None else 2
    width = n_features if method.kind == "dfi" else 2
    per_draw = 4 * (splits * (1 + width) + leaves * n_classes) + 32
    recorded = options.num_warmup + options.num_samples
    chains = options.num_chains
    return sorted([
        Part(f"recorded trace ({chains} chains x {recorded:,} iterations x {per_draw:,} bytes per draw)",
             2 * chains * recorded * per_draw, ("num_samples", "num_chains", "num_warmup", "max_depth"), False),
        Part(f"step temporaries (routing probabilities, {chains} chains x {n_rungs} rungs)",
             chains * n_rungs * 4 * n * (2 * leaves + n_features) * 4, ("max_depth", "rows", "num_chains"), True),
    ], key=lambda p: -p.nbytes)


def estimate_bart(config, problem, num_chains: int, num_warmup: int, num_samples: int, block_size: int,
                  devices=None) -> list[Part]:
    """The parts of a BART run's peak memory (:func:`estimate_run`'s for
    :class:`~bdtree_jax.kernels.bart.BARTConfig` ``config`` and a
    :class:`~bdtree_jax.problem.BARTProblem`): per recorded sweep ``num_trees`` padded trees and
    their leaf values; per chain every tree's state (node statistics and bounds, its rows' leaf
    slots as uint8 or int16), the leaf values and the fit."""
    n, n_features = problem.train_bins.shape
    trees, slots = config.n_trees, n_nodes(config.max_depth)
    n_cuts = int(problem.grid.n_cuts.max()) if problem.grid.n_cuts.size else 0
    dtypes = CGMConfig.from_prior(problem.prior, n_features=n_features, n_cuts=n_cuts).trace_dtypes
    slot = 1 + sum(np.dtype(t).itemsize for t in dtypes) + np.dtype(config.leaf_dtype).itemsize
    per_draw = (trees * slots * slot if config.record_trees else 0) + 64
    devices = jax.devices() if devices is None else list(devices)
    on_cpu = devices[0].platform == "cpu"
    per_device = math.ceil(num_chains / max(1, len(devices)))
    sharing = min(num_chains, len(devices)) if on_cpu else 1
    leaf_slot = 1 if config.max_depth <= 7 else 2
    state = trees * (slots * (9 + 4 * 3 + 8 * n_features + 5) + leaf_slot * n) + 8 * n
    step = trees * slots * 4 * 4 * n_features + 16 * 16 * n  # a tree's proposal tables, a batch of row masks
    recorded = num_warmup + num_samples
    drivers = ("num_samples", "num_chains", "num_trees", "max_depth", "num_warmup")
    return sorted([
        Part(f"recorded trace ({num_chains} chains x {recorded:,} sweeps x {per_draw:,} bytes per draw)",
             num_chains * recorded * per_draw, drivers, False),
        Part(f"the posterior's copy of the kept draws ({num_chains} x {num_samples:,} draws)",
             num_chains * num_samples * per_draw, drivers[:4], False),
        Part(f"trace buffers of the compiled blocks ({block_size} sweeps each)",
             3 * per_device * sharing * block_size * per_draw, ("num_trees", "max_depth", "num_chains"), True),
        Part(f"chain states ({num_chains} chains x {trees} trees)", per_device * sharing * state,
             ("num_trees", "rows", "num_chains", "max_depth"), True),
        Part("step temporaries", (per_device if not on_cpu and config.incremental is False else 1) * sharing * step,
             ("num_trees", "rows", "max_depth"), True),
        *_data_parts(problem, sharing),
    ], key=lambda p: -p.nbytes)


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cgroup_available() -> int | None:
    """What the process's cgroup (v2) still allows: ``memory.max - memory.current``; None without
    a limit."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as f:
            return max(0, int(limit) - int(f.read().strip()))
    except (OSError, ValueError):
        return None


def host_available_bytes() -> int | None:
    """Host memory available now: the smaller of ``/proc/meminfo``'s ``MemAvailable`` (or
    ``SC_AVPHYS_PAGES`` pages) and the cgroup's remaining limit; None if unknown."""
    found = [_meminfo_available(), _cgroup_available()]
    if found[0] is None:
        try:
            found[0] = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    found = [a for a in found if a is not None]
    return min(found) if found else None


def device_available_bytes(devices) -> int | None:
    """The accelerator memory left on the fullest of ``devices`` (``bytes_limit - bytes_in_use``
    of ``memory_stats()``); None on CPU or when the backend does not report it."""
    left = []
    for d in devices:
        if d.platform == "cpu":
            return None
        try:
            stats = d.memory_stats() or {}
        except Exception:  # backends without memory_stats raise various errors
            return None
        if "bytes_limit" not in stats:
            return None
        left.append(int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)))
    return min(left) if left else None


def available_bytes(devices=None) -> tuple[int | None, int | None]:
    """``(host bytes, device bytes)`` available now (:func:`host_available_bytes`,
    :func:`device_available_bytes`; None where unknown or on CPU)."""
    return host_available_bytes(), device_available_bytes(jax.devices() if devices is None else devices)


def _values(method, problem, options, n_rungs) -> dict:
    return dict(max_depth=problem.prior.max_depth, num_chains=options.num_chains, num_samples=options.num_samples,
                num_warmup=options.num_warmup, rows=problem.data.bins.shape[0], block_size=options.block_size,
                num_particles=getattr(method, "num_particles", None), num_temperatures=n_rungs)


def _disabled() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() in ("0", "false", "no", "off")


def check_run(method, problem, options, n_rungs: int = 1, where: str = "") -> None:
    """Raise a ``ValueError`` if the run's estimated memory (:func:`estimate_run` times
    :data:`XLA_FACTOR`, plus :data:`COMPILE_BYTES`) exceeds the memory available
    (:func:`available_bytes`), naming the largest parts, the arguments that drive them and what
    to lower.  Does nothing when the environment sets ``BDTREE_MEMORY_CHECK=0``."""
    if _disabled():
        return
    parts = estimate_run(method, problem, options, n_rungs)
    _compare(parts, _values(method, problem, options, n_rungs), compile_bytes(method), _devices(options), where)


def check_bart(config, problem, num_chains: int, num_warmup: int, num_samples: int, block_size: int,
               where: str = "") -> None:
    """:func:`check_run` for a BART fit (:func:`estimate_bart`)."""
    if _disabled():
        return
    parts = estimate_bart(config, problem, num_chains, num_warmup, num_samples, block_size)
    values = dict(max_depth=config.max_depth, num_chains=num_chains, num_samples=num_samples, num_warmup=num_warmup,
                  rows=problem.train_bins.shape[0], num_trees=config.n_trees)
    _compare(parts, values, COMPILE_BYTES.get("bart", COMPILE_BYTES["*"]), jax.devices(), where)


def _compare(parts: list, values: dict, compiling: int, devices, where: str) -> None:
    host, device = available_bytes(devices)
    if device is None:  # CPU: one memory
        need = sum(p.nbytes for p in parts) * XLA_FACTOR + compiling
        have, where_kind, shown = host, "host memory available", parts
    else:
        dev_parts = [p for p in parts if p.device]
        need_dev = sum(p.nbytes for p in dev_parts) * XLA_FACTOR
        need_host = sum(p.nbytes for p in parts if not p.device) * XLA_FACTOR + compiling
        if host is not None and need_host > host:
            need, have, where_kind, shown = need_host, host, "host memory available", [p for p in parts if not p.device]
        else:
            need, have, where_kind, shown = need_dev, device, "accelerator memory available", dev_parts
    if have is None or need <= have:
        return
    top = shown[:3]
    lines = "; ".join(f"{p.what}: {format_bytes(p.nbytes * XLA_FACTOR)}" for p in top)
    drivers = list(dict.fromkeys(d for p in top for d in p.drivers if values.get(d) is not None))
    named = ", ".join(f"{d}={values[d]}" for d in drivers)
    advice = [d for d in drivers if d not in ("rows", "num_temperatures")]
    hint = " or ".join(advice) if advice else "the number of rows"
    raise ValueError(
        f"{where}this run needs about {format_bytes(need)} (estimated before compiling) and {format_bytes(have)} of "
        f"{where_kind}.  Largest parts: {lines} (besides about {format_bytes(compiling)} to compile); driven by "
        f"{named}.  Lower {hint}, or set the environment variable {ENV_VAR}=0 to run anyway (docs/memory.md).")
