"""The library's one file format (checkpoints and saved posteriors), which cannot run code when read.

A file is an ``.npz`` (a zip of ``.npy`` arrays; a posterior's entries deflated, a checkpoint's
stored) whose entry ``header`` is a JSON document (as a uint8 array): the format's name and
version, the library version that wrote it, the kind of file (``"posterior"`` or
``"checkpoint"``), the class of the saved object, the object's ``content`` and a SHA-256
``checksum``.  Every numpy array of the object is an entry ``a<i>``; ``content`` describes the rest
of the object as JSON: plain values (str, int, float, bool, None), lists, tuples, dicts, numpy
scalars, object arrays of plain values, and the dataclasses and NamedTuples of :data:`TYPES`
(by their registered name).  Reading builds only those: a class is looked up in :data:`TYPES`
(never imported by a name taken from the file), a NamedTuple is rebuilt from its fields and a
dataclass is filled in field by field without calling its ``__init__`` (as unpickling would),
then checked by the class's own validation (its ``__post_init__``, or :data:`_CHECKS`), so
reading a file runs no code of the file's choosing and yields no object its constructor refuses.

Format version 2 (this one) stores padded trees compactly (:func:`_encode_tree`: ``is_split`` as
bits, the other fields only at splitting nodes) and lets a class store some fields in a compact
form of its own (``_file_fields`` / ``_file_restore``: BART's leaf values only at leaves); a file
that uses neither is written as version 1, which every earlier reader reads.

Reading is bounded: every entry's ``.npy`` header (shape and dtype) is checked against the entry's
real size in the archive, a deflated entry against what deflate can expand to, the total against
:func:`max_read_bytes`, and the checksum is verified by streaming every entry before any array is
built.  The checksum covers ``content`` and every array's name, dtype, shape and bytes.  Every way
a file can be unreadable (empty, truncated, not a zip, an ``.npz`` of another program, the wrong
kind, a newer format version, a checksum mismatch, an unknown type, sizes that do not add up, an
invalid value) raises :class:`BdtreeFileError`, whose message names the file and what to do.
Files are written to a temporary file in the same folder, flushed to disk and renamed over the
target, so an interrupted write leaves the previous file.

See ``docs/files.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import os
import sys
import tempfile
import zipfile

import jax
import numpy as np
from ._validate import check_one_of

__all__ = ["BdtreeFileError", "FORMAT_VERSION", "PickleFileWarning", "TYPES", "file_kind", "max_read_bytes",
           "read_file", "write_file"]

#: Name of the format, the ``format`` field of every header.
FORMAT_NAME = "bdtree_jax"
#: Version of the format this library writes (at most; a file that needs none of version 2's
#: compact forms is written as version 1); it reads every version up to this one.
FORMAT_VERSION = 2
#: Environment variable: the most bytes of arrays a file may declare (default: the machine's memory).
MAX_BYTES_ENV = "BDTREE_MAX_FILE_BYTES"
#: Largest ratio of a deflated entry's size to its compressed size that deflate can produce
#: (1032:1 in theory), with some slack.
_DEFLATE_RATIO = 1040
#: The kinds of file.
KINDS = ("posterior", "checkpoint")

#: The classes a file may hold, by the name the file records (stable across moves of the code):
#: ``name -> "module:qualified name"``.  The library's own trees, grids, leaf models, priors,
#: configurations, posteriors and sampler states, plus NumPyro's NUTS states (checkpoints of
#: RJHMC).  A class that is not here cannot be written (``TypeError`` when saving).
TYPES = {
    # trees, data, leaf models and priors
    "Tree": "bdtree_jax.tree:Tree",
    "MixedTree": "bdtree_jax.tree:MixedTree",
    "SplitGrid": "bdtree_jax.data:SplitGrid",
    "TreeData": "bdtree_jax.data:TreeData",
    "DirichletMultinomial": "bdtree_jax.likelihoods:DirichletMultinomial",
    "NormalMeanShift": "bdtree_jax.likelihoods:NormalMeanShift",
    "BARTLeafNormal": "bdtree_jax.likelihoods:BARTLeafNormal",
    "BARTLeafPoissonGamma": "bdtree_jax.likelihoods:BARTLeafPoissonGamma",
    "BARTLeafVarianceGamma": "bdtree_jax.likelihoods:BARTLeafVarianceGamma",
    "TreePrior": "bdtree_jax.priors.tree_prior:TreePrior",
    "BoxGrammar": "bdtree_jax.pcfg.grammar:BoxGrammar",
    # configurations
    "RJHMCConfig": "bdtree_jax.kernels.rjhmc:RJHMCConfig",
    "BARTConfig": "bdtree_jax.kernels.bart:BARTConfig",
    "DARTConfig": "bdtree_jax.kernels.dart:DARTConfig",
    # posteriors
    "Posterior": "bdtree_jax.posterior.hard:Posterior",
    "PCFGPosterior": "bdtree_jax.posterior.hard:PCFGPosterior",
    "SMCPosterior": "bdtree_jax.posterior.hard:SMCPosterior",
    "SoftTreePosterior": "bdtree_jax.posterior.soft:SoftTreePosterior",
    "BARTPosterior": "bdtree_jax.posterior.bart:BARTPosterior",
    "BARTClassifierPosterior": "bdtree_jax.posterior.bart:BARTClassifierPosterior",
    "BARTPoissonPosterior": "bdtree_jax.posterior.bart_poisson:BARTPoissonPosterior",
    "BARTMulticlassPosterior": "bdtree_jax.posterior.bart_multiclass:BARTMulticlassPosterior",
    "BARTSurvivalPosterior": "bdtree_jax.posterior.bart_survival:BARTSurvivalPosterior",
    "BARTVariancePosterior": "bdtree_jax.posterior.bart_variance:BARTVariancePosterior",
    # sampler states and results in checkpoints (typed PRNG keys travel as HostKey)
    "HostKey": "bdtree_jax._checkpoint:HostKey",
    "CGMState": "bdtree_jax.kernels._moves:CGMState",
    "PerturbState": "bdtree_jax.kernels.perturb:PerturbState",
    "EditState": "bdtree_jax.kernels.edit:EditState",
    "BARTState": "bdtree_jax.kernels.bart:BARTState",
    "VarianceState": "bdtree_jax.kernels.bart_variance:VarianceState",
    "DARTState": "bdtree_jax.kernels.dart:DARTState",
    "SMCState": "bdtree_jax.kernels.smc:SMCState",
    "SMCResult": "bdtree_jax.kernels.smc:SMCResult",
    "RJHMCState": "bdtree_jax.kernels.rjhmc:RJHMCState",
    "TopologyMHState": "bdtree_jax.numpyro.soft:TopologyMHState",
    "numpyro.HMCState": "numpyro.infer.hmc:HMCState",
    "numpyro.HMCAdaptState": "numpyro.infer.hmc_util:HMCAdaptState",
    "numpyro.IntegratorState": "numpyro.infer.hmc_util:IntegratorState",
}
_BY_CLASS = {path: name for name, path in TYPES.items()}


class BdtreeFileError(ValueError):
    """A file that is not a readable bdtree_jax file of the expected kind; the message names the
    file, what is wrong with it and what to do."""


class PickleFileWarning(UserWarning):
    """An old pickled file was read (``allow_pickle=True``): unpickling can run any code the
    file holds."""


def _library_version() -> str:
    package = sys.modules.get("bdtree_jax")  # always imported before any of its modules runs
    return str(getattr(package, "__version__", "unknown"))


# -- encoding ------------------------------------------------------------------------------------


class _Arrays(list):
    """The arrays of a file being written, and the lowest format version that reads it."""

    version = 1


def _type_name(cls) -> str | None:
    return _BY_CLASS.get(f"{cls.__module__}:{cls.__qualname__}")


def _encode(x, arrays: _Arrays, where: str):
    """``x`` as JSON, its numpy arrays appended to ``arrays`` (referred to by index)."""
    if x is None or isinstance(x, (bool, str)) and not isinstance(x, np.generic):
        return x
    if isinstance(x, int) and not isinstance(x, np.generic):
        return x
    if isinstance(x, float) and not isinstance(x, np.generic):
        return x if math.isfinite(x) else {"t": "float", "v": repr(x)}
    if isinstance(x, np.generic):
        return dict(_array(np.asarray(x), arrays, where), scalar=True)
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return {"t": "objects", "shape": list(x.shape),
                    "items": [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(x.ravel())]}
        return _array(x, arrays, where)
    if isinstance(x, jax.Array):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            raise TypeError(f"{where} is a typed PRNG key: store its key data (bdtree_jax._checkpoint.HostKey).")
        return _array(np.asarray(x), arrays, where)
    if isinstance(x, dict):
        return {"t": "dict", "items": [[_encode(k, arrays, f"{where} key"), _encode(v, arrays, f"{where}[{k!r}]")]
                                       for k, v in x.items()]}
    name = _type_name(type(x))
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):
        if name is None:
            raise TypeError(f"{where} is a {type(x).__module__}.{type(x).__qualname__}, which the file format "
                            f"cannot store: add it to bdtree_jax._files.TYPES.")
        if name in _TREE_TYPES and _is_tree_stack(x):
            return _encode_tree(x, name, arrays, where)
        return {"t": "namedtuple", "type": name,
                "fields": [[f, _encode(getattr(x, f), arrays, f"{where}.{f}")] for f in x._fields]}
    if type(x) in (tuple, list):
        return {"t": type(x).__name__, "items": [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(x)]}
    if dataclasses.is_dataclass(x) and not isinstance(x, type) and name is not None:
        fields = {f.name: getattr(x, f.name) for f in dataclasses.fields(x)}
        if hasattr(type(x), "_file_fields"):  # the class's own compact form of some fields
            compact = x._file_fields()
            if any(compact.get(k, v) is not v for k, v in fields.items()):
                arrays.version = max(arrays.version, 2)
            fields = compact
        return {"t": "dataclass", "type": name,
                "fields": [[k, _encode(v, arrays, f"{where}.{k}")] for k, v in fields.items()]}
    raise TypeError(f"{where} is a {type(x).__module__}.{type(x).__qualname__}, which the file format cannot store "
                    f"(plain values, lists, tuples, dicts, numpy arrays and the classes of bdtree_jax._files.TYPES).")


def _array(a: np.ndarray, arrays: list, where: str) -> dict:
    """The reference to a numeric array; a dtype numpy's files do not know (bfloat16 and the other
    ml_dtypes) is stored as unsigned integers of its width and its name recorded."""
    spec = {"t": "array", "i": len(arrays), "dtype": a.dtype.name}
    if a.dtype.kind == "V" or type(a.dtype).__module__.startswith("ml_dtypes"):
        a = a.view(f"u{a.dtype.itemsize}")
        spec["as"] = a.dtype.str
    arrays.append(a if a.flags.c_contiguous else a.copy(order="C"))  # (ascontiguousarray makes 0-d 1-d)
    return spec


#: The padded trees stored compactly (:func:`_encode_tree`).
_TREE_TYPES = ("Tree", "MixedTree")


def _nonzero_bits(a: np.ndarray) -> bool:
    """Whether any byte of ``a`` is not 0 (-0.0 and NaN count as set)."""
    return a.size > 0 and bool(np.ascontiguousarray(a).view(np.uint8).any())


def _is_tree_stack(x) -> bool:
    """A tree (or a stack of trees, leading axes first) of host arrays: ``is_split`` a bool
    ``(..., N)`` array and every other field None or an array with the same leading shape."""
    s = x.is_split
    if not (isinstance(s, np.ndarray) and s.dtype == np.bool_ and s.ndim >= 1):
        return False
    return all(v is None or isinstance(v, np.ndarray) and v.dtype != object and v.shape[:s.ndim] == s.shape
               for v in x[1:])


def leaf_mask(is_split: np.ndarray) -> np.ndarray:
    """``(..., N)`` bool: the leaves of padded heap trees (active nodes that do not split; a node
    is active when every ancestor splits)."""
    is_split = np.asarray(is_split, bool)
    N = is_split.shape[-1]
    active = np.ones(is_split.shape, bool)
    start = 1
    while start < N:  # one heap level at a time: its nodes' parents are the level above
        stop = min(2 * start + 1, N)
        parents = (np.arange(start, stop) - 1) // 2
        active[..., start:stop] = active[..., parents] & is_split[..., parents]
        start = stop
    return active & ~is_split


def _encode_tree(x, name: str, arrays: _Arrays, where: str) -> dict:
    """A stack of padded trees (format version 2): ``is_split`` as bits (``np.packbits`` along the
    heap), every other field only at the splitting nodes when it is zero everywhere else (the
    library's canonical unused slots), else whole."""
    s = x.is_split
    spec = {"t": "tree", "type": name, "shape": list(s.shape),
            "bits": _array(np.packbits(s, axis=-1), arrays, f"{where}.is_split"), "fields": []}
    for f in x._fields[1:]:
        v = getattr(x, f)
        if v is None:
            spec["fields"].append([f, None])
        elif _nonzero_bits(v[~s]):
            spec["fields"].append([f, _array(v, arrays, f"{where}.{f}")])
        else:
            spec["fields"].append([f, {"t": "at_splits", "v": _array(v[s], arrays, f"{where}.{f}")}])
    arrays.version = max(arrays.version, 2)
    return spec


def _checksum(content, arrays: list) -> str:
    h = hashlib.sha256(json.dumps(content, sort_keys=True).encode())
    for i, a in enumerate(arrays):
        h.update(f"|a{i}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes(order="C"))
    return h.hexdigest()


def write_file(path, kind: str, obj) -> None:
    """Write ``obj`` (a posterior, a checkpoint's dict) to ``path`` as a file of ``kind``:
    atomically (a temporary file in the same folder, flushed to disk, renamed over ``path``).
    A posterior's entries are deflated, a checkpoint's stored (written often, read once).
    A ``TypeError`` names anything in ``obj`` the format cannot store, before the file is touched."""
    check_one_of("kind", kind, KINDS)
    arrays = _Arrays()
    content = _encode(obj, arrays, type(obj).__name__)
    header = dict(format=FORMAT_NAME, format_version=arrays.version, library_version=_library_version(), kind=kind,
                  type=content.get("type", type(obj).__name__) if isinstance(content, dict) else type(obj).__name__,
                  content=content, checksum=_checksum(content, arrays))
    entries = {"header": np.frombuffer(json.dumps(header).encode(), np.uint8)}
    entries.update((f"a{i}", a) for i, a in enumerate(arrays))
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            _write_npz(fh, entries, compress=kind == "posterior")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable (POSIX)
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _write_npz(fh, entries: dict, compress: bool) -> None:
    """``entries`` as an ``.npz`` (what ``np.savez`` / ``np.savez_compressed`` write)."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(fh, "w", compression=method, allowZip64=True) as zf:
        for name, a in entries.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, a, allow_pickle=False)


# -- decoding ------------------------------------------------------------------------------------


class _Bad(Exception):
    """What is wrong with a file (turned into a BdtreeFileError naming the file)."""


def _lookup(name) -> type:
    if not isinstance(name, str) or name not in TYPES:
        raise _Bad(f"it holds a type {name!r} this version of bdtree_jax does not know (a file of a newer "
                   f"version, or not written by bdtree_jax)")
    module, qualname = TYPES[name].split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _decode(spec, arrays: dict):
    if spec is None or isinstance(spec, (bool, int, float, str)):
        return spec
    if not isinstance(spec, dict):
        raise _Bad(f"its content holds {type(spec).__name__} where a tagged value belongs")
    t = spec.get("t")
    if t == "float":
        return float(spec["v"])
    if t == "array":
        a = arrays.get(spec.get("i"))
        if a is None:
            raise _Bad(f"its array a{spec.get('i')} is missing")
        if "as" in spec:
            import jax.numpy as jnp  # registers the ml_dtypes (bfloat16, ...) with numpy

            dtype = jnp.dtype(spec["dtype"])
            if dtype.kind == "O" or dtype.itemsize != a.dtype.itemsize:
                raise _Bad(f"its array a{spec['i']} cannot be read as {spec['dtype']}")
            a = a.view(dtype)
        elif a.dtype.name != spec["dtype"]:
            raise _Bad(f"its array a{spec['i']} has dtype {a.dtype.name}, not the recorded {spec['dtype']}")
        return a[()] if spec.get("scalar") else a
    if t == "objects":
        out = np.empty(len(spec["items"]), object)
        for i, item in enumerate(spec["items"]):
            out[i] = _decode(item, arrays)
        return out.reshape(spec["shape"])
    if t in ("list", "tuple"):
        items = [_decode(v, arrays) for v in spec["items"]]
        return items if t == "list" else tuple(items)
    if t == "dict":
        return {_decode(k, arrays): _decode(v, arrays) for k, v in spec["items"]}
    if t == "tree":
        return _decode_tree(spec, arrays)
    if t in ("namedtuple", "dataclass"):
        cls = _lookup(spec.get("type"))
        fields = {name: _decode(v, arrays) for name, v in spec["fields"]}
        if t == "namedtuple":
            if not (isinstance(cls, type) and issubclass(cls, tuple)) or list(fields) != list(cls._fields):
                raise _Bad(f"its {spec['type']} has fields {list(fields)}, this version's has "
                           f"{list(getattr(cls, '_fields', ()))}")
            return cls._make(fields.values())
        if hasattr(cls, "_file_restore"):
            try:
                fields = cls._file_restore(fields)
            except (ValueError, TypeError, KeyError, IndexError) as e:
                raise _Bad(f"its {spec['type']} is inconsistent ({e})") from None
        return _fill_dataclass(cls, spec["type"], fields)
    raise _Bad(f"its content holds an unknown tag {t!r}")


def _decode_tree(spec: dict, arrays: dict):
    """The stack of trees of :func:`_encode_tree`."""
    name = spec.get("type")
    if name not in _TREE_TYPES:
        raise _Bad(f"its compact trees are of type {name!r}, not a tree")
    cls = _lookup(name)
    shape = spec["shape"]
    if not (isinstance(shape, list) and shape and all(type(d) is int and d >= 0 for d in shape)):
        raise _Bad(f"its trees have an invalid shape {shape!r}")
    shape = tuple(shape)
    bits = _decode(spec["bits"], arrays)
    if not isinstance(bits, np.ndarray) or bits.dtype != np.uint8 or bits.shape != shape[:-1] + (-(-shape[-1] // 8),):
        raise _Bad(f"its trees' bits do not fit their shape {shape}")
    s = np.unpackbits(bits, axis=-1, count=shape[-1]).astype(bool)
    fields = {"is_split": s}
    for f, fs in spec["fields"]:
        if isinstance(fs, dict) and fs.get("t") == "at_splits":
            v = _decode(fs["v"], arrays)
            if not isinstance(v, np.ndarray) or v.ndim < 1 or v.shape[0] != int(s.sum()):
                raise _Bad(f"its trees' {f} holds {getattr(v, 'shape', None)} values at {int(s.sum())} splits")
            full = np.zeros(shape + v.shape[1:], v.dtype)
            full[s] = v
            fields[f] = full
        else:
            v = _decode(fs, arrays)
            if v is not None and (not isinstance(v, np.ndarray) or v.shape[:len(shape)] != shape):
                raise _Bad(f"its trees' {f} does not have the trees' shape {shape}")
            fields[f] = v
    if list(fields) != list(cls._fields):
        raise _Bad(f"its {name} has fields {list(fields)}, this version's has {list(cls._fields)}")
    return cls._make(fields.values())


def _number(v, name: str, ok, what: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not (
            np.isfinite(v) and ok(v)):
        raise ValueError(f"{name} must be {what}; got {v!r}.")


#: The validation of the registered dataclasses that have no ``__post_init__`` of their own (the
#: checks :func:`~bdtree_jax.problem.build_problem` applies to a leaf model's options).
_CHECKS = {
    "DirichletMultinomial": lambda o: (
        _number(o.n_classes, "n_classes", lambda v: v >= 2 and v == int(v), "an integer >= 2"),
        _number(o.concentration, "concentration", lambda v: v > 0, "a finite number > 0")),
    "NormalMeanShift": lambda o: (
        *(_number(getattr(o, k), k, lambda v: v > 0, "a finite number > 0") for k in ("nu", "lam", "a")),
        _number(o.mu_bar, "mu_bar", lambda v: True, "a finite number")),
    "BARTLeafNormal": lambda o: tuple(
        _number(getattr(o, k), k, lambda v: v > 0, "a finite number > 0") for k in ("sigma2", "tau2")),
    # before TreePrior's own checks, whose message about a deep heap computes 2**(max_depth + 1)
    "TreePrior": lambda o: _max_depth(o),
}


def _max_depth(prior) -> None:
    cap = sys.modules[type(prior).__module__].MAX_DEPTH  # the cap TreePrior checks against (bdtree_jax.tree's)
    v = prior.max_depth
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > cap:
        raise ValueError(f"max_depth={v} is over the cap of {cap}")


def _fill_dataclass(cls, name: str, fields: dict):
    """An instance of the dataclass ``cls`` with ``fields`` set, its ``__init__`` not called (as
    unpickling does); a field this version added takes its default.  The instance is then checked
    as its constructor checks it (``__post_init__``, or :data:`_CHECKS`): an invalid value is a
    :class:`_Bad` naming it."""
    if not dataclasses.is_dataclass(cls):
        raise _Bad(f"{name} is not a dataclass in this version")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise _Bad(f"its {name} has fields {unknown} this version does not know")
    obj = cls.__new__(cls)
    for f in known.values():
        if f.name in fields:
            value = fields[f.name]
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            raise _Bad(f"its {name} lacks the field {f.name!r}")
        object.__setattr__(obj, f.name, value)
    checks = [c for c in (_CHECKS.get(name), getattr(cls, "__post_init__", None)) if c is not None]
    for check in checks:
        try:
            check(obj)
        except (ValueError, TypeError, AttributeError, IndexError, KeyError, OverflowError) as e:
            raise _Bad(f"its {name} holds an invalid value ({e})") from None
    return obj


# -- reading, bounded ----------------------------------------------------------------------------


def max_read_bytes() -> int:
    """The most bytes of arrays a file may declare: the environment variable
    :data:`MAX_BYTES_ENV` if set, else the machine's physical memory (a file that declares more
    could not be read anyway)."""
    given = os.environ.get(MAX_BYTES_ENV)
    if given:
        try:
            return int(float(given))
        except ValueError:
            raise ValueError(f"{MAX_BYTES_ENV} must be a number of bytes; got {given!r}.") from None
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 2**40


_CHUNK = 1 << 20


class _Entry:
    """One ``.npy`` entry of the archive, its header checked against its real size."""

    def __init__(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, archive_bytes: int):
        self.zf, self.info, self.name = zf, info, info.filename[:-4]
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _Bad(f"its entry {self.name} uses a compression ({info.compress_type}) bdtree_jax never writes")
        if info.compress_size > archive_bytes or (
                info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size) or (
                info.file_size > _DEFLATE_RATIO * info.compress_size + 1024):
            raise _Bad(f"its entry {self.name} declares {info.file_size:,} bytes, more than its "
                       f"{info.compress_size:,} bytes in the archive can hold: the file is damaged")
        with zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise _Bad(f"its entry {self.name} is an .npy of version {version}, which bdtree_jax never writes")
            self.offset = f.tell()
        if dtype.hasobject:
            raise _Bad(f"its entry {self.name} holds Python objects, which bdtree_jax never writes")
        if fortran and len(shape) > 1:
            raise _Bad(f"its entry {self.name} is in Fortran order, which bdtree_jax never writes")
        if not all(type(d) is int and d >= 0 for d in shape):
            raise _Bad(f"its entry {self.name} has an invalid shape {shape!r}")
        self.shape, self.dtype = tuple(shape), dtype
        self.nbytes = math.prod(shape) * dtype.itemsize
        if self.offset + self.nbytes != info.file_size:
            raise _Bad(f"its entry {self.name} declares a {dtype.name} array of shape {self.shape} "
                       f"({self.nbytes:,} bytes) but holds {info.file_size - self.offset:,} bytes: the file is damaged")

    def chunks(self):
        """The entry's data bytes, ``_CHUNK`` at a time (a short or corrupt entry: a ``_Bad``)."""
        with self.zf.open(self.info) as f:
            f.read(self.offset)
            left = self.nbytes
            while left:
                data = f.read(min(left, _CHUNK))
                if not data:
                    raise _Bad(f"its entry {self.name} ends early: the file is truncated")
                left -= len(data)
                yield data

    def array(self) -> np.ndarray:
        """The entry's array (only after its size was checked)."""
        a = np.empty(self.shape, self.dtype)
        view = memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")
        pos = 0
        for data in self.chunks():
            view[pos : pos + len(data)] = data
            pos += len(data)
        return a


def _sniff(head: bytes) -> str | None:
    """What the first bytes of a file say it is: ``"npz"``, ``"pickle"``, ``"netcdf"``, ``"empty"`` or None."""
    if not head:
        return "empty"
    if head[:1] == b"\x80":
        return "pickle"
    if head[:4] == b"PK\x03\x04":
        return "npz"
    if head[:4] == b"\x89HDF" or head[:3] == b"CDF":
        return "netcdf"
    return None


_NETCDF = ("it is a netCDF file (the ArviZ InferenceData of `bdtree run`'s posterior.nc, or "
           "Posterior.to_arviz().to_netcdf): read it with bd.load(path) or arviz.from_netcdf(path)")


def read_file(path, kind: str | None, *, remedy: str):
    """The object stored in the file ``path`` of ``kind`` (``"posterior"``, ``"checkpoint"``, or
    None for either).

    Raises :class:`BdtreeFileError` naming ``path``, what is wrong and ``remedy`` (what to do,
    e.g. "re-run the fit") when the file is empty, truncated, damaged, not a bdtree_jax file, of
    another kind, of a newer format version, declares more than it holds (or than
    :func:`max_read_bytes`), fails its checksum or holds an invalid value; ``FileNotFoundError``
    when there is no file.
    """
    return read_file_with_header(path, kind, remedy=remedy)[1]


def read_file_with_header(path, kind: str | None, *, remedy: str) -> tuple[dict, object]:
    """``(header, object)`` of :func:`read_file`."""
    path = os.fspath(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        try:
            return _read(fh, head, path, kind)
        except _Bad as e:
            raise BdtreeFileError(f"{path}: cannot read this {kind or 'bdtree_jax'} file: {e}. {remedy}") from None


def file_kind(path) -> str | None:
    """What the file ``path`` is, from its first bytes and (an ``.npz``) its header: ``"posterior"``,
    ``"checkpoint"``, ``"netcdf"``, ``"pickle"``, ``"empty"``, ``"npz"`` (another program's or an
    unreadable one) or None (anything else)."""
    with open(os.fspath(path), "rb") as fh:
        what = _sniff(fh.read(8))
        if what != "npz":
            return what
        fh.seek(0)
        try:
            with zipfile.ZipFile(fh) as zf:
                header = _read_header(zf, os.fstat(fh.fileno()).st_size)
            return header.get("kind") if header.get("kind") in KINDS else "npz"
        except (_Bad, zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError):
            return "npz"


def _read_header(zf: zipfile.ZipFile, size: int) -> dict:
    """The JSON header of an open archive, checked to be a bdtree_jax header."""
    try:
        info = zf.getinfo("header.npy")
    except KeyError:
        raise _Bad("it is an .npz file without a bdtree_jax header: the file was written by another program") from None
    entry = _Entry(zf, info, size)
    if entry.dtype != np.uint8 or len(entry.shape) != 1:
        raise _Bad("its header is not a JSON document: the file was written by another program")
    if entry.nbytes > max_read_bytes():
        raise _Bad(f"its header declares {entry.nbytes:,} bytes, more than the {max_read_bytes():,} bytes a file may "
                   f"hold here ({MAX_BYTES_ENV})")
    try:
        header = json.loads(b"".join(entry.chunks()).decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise _Bad(f"its header is not valid JSON ({e}): the file is damaged") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise _Bad("its header is not a bdtree_jax header: the file was written by another program")
    return header


def _read(fh, head: bytes, path: str, kind: str | None):
    what = _sniff(head)
    if what == "empty":
        raise _Bad("it is empty (0 bytes; its write was interrupted)")
    if what == "pickle":
        raise _Bad("it is a pickle (the format of bdtree_jax 0.1), which this reader does not run: pickles can "
                   "run code when read")
    if what == "netcdf":
        raise _Bad(_NETCDF)
    if what != "npz":
        raise _Bad("it is not a bdtree_jax file (not an .npz archive): it was written by another program, or is "
                   "damaged")
    fh.seek(0)
    size = os.fstat(fh.fileno()).st_size
    try:
        with zipfile.ZipFile(fh) as zf:
            header = _read_header(zf, size)
            version = header.get("format_version")
            if not isinstance(version, int) or version < 1:
                raise _Bad(f"its header has no valid format version ({version!r}): the file is damaged")
            if version > FORMAT_VERSION:
                raise _Bad(f"it has format version {version}, written by bdtree_jax "
                           f"{header.get('library_version')}; this bdtree_jax ({_library_version()}) reads format "
                           f"versions up to {FORMAT_VERSION}: upgrade bdtree_jax to >= "
                           f"{header.get('library_version')}")
            if kind is not None and header.get("kind") != kind:
                load = "bd.load(path)" + (" (or Posterior.load)" if header.get("kind") == "posterior" else "")
                raise _Bad(f"it holds a {header.get('kind')} ({header.get('type')}), not a {kind}: read it with {load}")
            if header.get("kind") not in KINDS:
                raise _Bad(f"its header names an unknown kind {header.get('kind')!r}: the file is damaged")
            entries = {}
            for info in zf.infolist():
                name = info.filename
                if name[:1] == "a" and name.endswith(".npy") and name[1:-4].isdigit():
                    entries[int(name[1:-4])] = _Entry(zf, info, size)
            total = sum(e.nbytes for e in entries.values())
            if total > max_read_bytes():
                raise _Bad(f"its arrays declare {total:,} bytes, more than the {max_read_bytes():,} bytes a file may "
                           f"hold here (the machine's memory, or {MAX_BYTES_ENV})")
            content = header.get("content")
            if sorted(entries) != list(range(len(entries))) or header.get("checksum") != _stream_checksum(
                    content, [entries[i] for i in range(len(entries))]):
                raise _Bad("its checksum does not match its content: the file was changed or damaged after it was "
                           "written")
            arrays = {i: e.array() for i, e in entries.items()}  # only now: every entry's bytes checked
    except _Bad:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, RuntimeError, NotImplementedError) as e:
        raise _Bad(f"it is damaged or truncated ({type(e).__name__}: {e})") from None
    try:
        return header, _decode(content, arrays)
    except _Bad:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as e:
        raise _Bad(f"its content is malformed ({type(e).__name__}: {e})") from None


def _stream_checksum(content, entries: list) -> str:
    """:func:`_checksum` of the arrays the ``entries`` hold, read a chunk at a time (no array built)."""
    h = hashlib.sha256(json.dumps(content, sort_keys=True).encode())
    for i, e in enumerate(entries):
        h.update(f"|a{i}|{e.dtype.str}|{e.shape}|".encode())
        for data in e.chunks():
            h.update(data)
    return h.hexdigest()
