"""The library's one file format (checkpoints and saved posteriors), which cannot run code when read.

A file is an uncompressed ``.npz`` (a zip of ``.npy`` arrays) read with ``np.load(...,
allow_pickle=False)``.  Its entry ``header`` is a JSON document (as a uint8 array): the format's
name and version, the library version that wrote it, the kind of file (``"posterior"`` or
``"checkpoint"``), the class of the saved object, the object's ``content`` and a SHA-256
``checksum``.  Every numpy array of the object is an entry ``a<i>``; ``content`` describes the rest
of the object as JSON: plain values (str, int, float, bool, None), lists, tuples, dicts, numpy
scalars, object arrays of plain values, and the dataclasses and NamedTuples of :data:`TYPES`
(by their registered name).  Reading builds only those: a class is looked up in :data:`TYPES`
(never imported by a name taken from the file), a NamedTuple is rebuilt from its fields and a
dataclass is filled in field by field without calling its ``__init__`` (as unpickling would),
so reading a file runs no code of the file's choosing.

The checksum covers ``content`` and every array's name, dtype, shape and bytes.  Every way a file
can be unreadable (empty, truncated, not a zip, an ``.npz`` of another program, the wrong kind, a
newer format version, a checksum mismatch, an unknown type) raises :class:`BdtreeFileError`, whose
message names the file and what to do.  Files are written to a temporary file in the same folder,
flushed to disk and renamed over the target, so an interrupted write leaves the previous file.

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

__all__ = ["BdtreeFileError", "FORMAT_VERSION", "PickleFileWarning", "TYPES", "read_file", "write_file"]

#: Name of the format, the ``format`` field of every header.
FORMAT_NAME = "bdtree_jax"
#: Version of the format this library writes; it reads every version up to this one.
FORMAT_VERSION = 1
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
    "TreePrior": "bdtree_jax.priors.tree_prior:TreePrior",
    "BoxGrammar": "bdtree_jax.pcfg.grammar:BoxGrammar",
    # configurations
    "RJHMCConfig": "bdtree_jax.kernels.rjhmc:RJHMCConfig",
    "BARTConfig": "bdtree_jax.kernels.bart:BARTConfig",
    # posteriors
    "Posterior": "bdtree_jax.posterior.hard:Posterior",
    "PCFGPosterior": "bdtree_jax.posterior.hard:PCFGPosterior",
    "SMCPosterior": "bdtree_jax.posterior.hard:SMCPosterior",
    "SoftTreePosterior": "bdtree_jax.posterior.soft:SoftTreePosterior",
    "BARTPosterior": "bdtree_jax.posterior.bart:BARTPosterior",
    "BARTClassifierPosterior": "bdtree_jax.posterior.bart:BARTClassifierPosterior",
    # sampler states and results in checkpoints (typed PRNG keys travel as HostKey)
    "HostKey": "bdtree_jax._checkpoint:HostKey",
    "CGMState": "bdtree_jax.kernels._moves:CGMState",
    "PerturbState": "bdtree_jax.kernels.perturb:PerturbState",
    "EditState": "bdtree_jax.kernels.edit:EditState",
    "BARTState": "bdtree_jax.kernels.bart:BARTState",
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


def _type_name(cls) -> str | None:
    return _BY_CLASS.get(f"{cls.__module__}:{cls.__qualname__}")


def _encode(x, arrays: list, where: str):
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
        return {"t": "namedtuple", "type": name,
                "fields": [[f, _encode(getattr(x, f), arrays, f"{where}.{f}")] for f in x._fields]}
    if type(x) in (tuple, list):
        return {"t": type(x).__name__, "items": [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(x)]}
    if dataclasses.is_dataclass(x) and not isinstance(x, type) and name is not None:
        return {"t": "dataclass", "type": name,
                "fields": [[f.name, _encode(getattr(x, f.name), arrays, f"{where}.{f.name}")]
                           for f in dataclasses.fields(x)]}
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


def _checksum(content, arrays: list) -> str:
    h = hashlib.sha256(json.dumps(content, sort_keys=True).encode())
    for i, a in enumerate(arrays):
        h.update(f"|a{i}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes(order="C"))
    return h.hexdigest()


def write_file(path, kind: str, obj) -> None:
    """Write ``obj`` (a posterior, a checkpoint's dict) to ``path`` as a file of ``kind``:
    atomically (a temporary file in the same folder, flushed to disk, renamed over ``path``).
    A ``TypeError`` names anything in ``obj`` the format cannot store, before the file is touched."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}.")
    arrays: list = []
    content = _encode(obj, arrays, type(obj).__name__)
    header = dict(format=FORMAT_NAME, format_version=FORMAT_VERSION, library_version=_library_version(), kind=kind,
                  type=content.get("type", type(obj).__name__) if isinstance(content, dict) else type(obj).__name__,
                  content=content, checksum=_checksum(content, arrays))
    entries = {"header": np.frombuffer(json.dumps(header).encode(), np.uint8)}
    entries.update((f"a{i}", a) for i, a in enumerate(arrays))
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **entries)
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
    if t in ("namedtuple", "dataclass"):
        cls = _lookup(spec.get("type"))
        fields = {name: _decode(v, arrays) for name, v in spec["fields"]}
        if t == "namedtuple":
            if not (isinstance(cls, type) and issubclass(cls, tuple)) or list(fields) != list(cls._fields):
                raise _Bad(f"its {spec['type']} has fields {list(fields)}, this version's has "
                           f"{list(getattr(cls, '_fields', ()))}")
            return cls._make(fields.values())
        return _fill_dataclass(cls, spec["type"], fields)
    raise _Bad(f"its content holds an unknown tag {t!r}")


def _fill_dataclass(cls, name: str, fields: dict):
    """An instance of the dataclass ``cls`` with ``fields`` set, its ``__init__`` not called (as
    unpickling does); a field this version added takes its default."""
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
    return obj


def _header(path: str, z) -> dict:
    if "header" not in z.files:
        raise _Bad("it is an .npz file without a bdtree_jax header: the file was written by another program")
    raw = z["header"]
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise _Bad("its header is not a JSON document: the file was written by another program")
    try:
        header = json.loads(raw.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise _Bad(f"its header is not valid JSON ({e}): the file is damaged") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise _Bad("its header is not a bdtree_jax header: the file was written by another program")
    return header


def read_file(path, kind: str, *, remedy: str):
    """The object stored in the file ``path`` of ``kind`` (``"posterior"`` or ``"checkpoint"``).

    Raises :class:`BdtreeFileError` naming ``path``, what is wrong and ``remedy`` (what to do,
    e.g. "re-run the fit") when the file is empty, truncated, damaged, not a bdtree_jax file, of
    another kind, of a newer format version, or fails its checksum; ``FileNotFoundError`` when
    there is no file.
    """
    path = os.fspath(path)
    with open(path, "rb") as fh:
        head = fh.read(4)
        try:
            return _read(fh, head, path, kind)
        except _Bad as e:
            raise BdtreeFileError(f"{path}: cannot read this {kind} file: {e}. {remedy}") from None


def _read(fh, head: bytes, path: str, kind: str):
    if not head:
        raise _Bad("it is empty (0 bytes; its write was interrupted)")
    if head[:1] == b"\x80":
        raise _Bad("it is a pickle (the format of bdtree_jax 0.1), which this reader does not run: pickles can "
                   "run code when read")
    if head != b"PK\x03\x04":
        raise _Bad("it is not a bdtree_jax file (not an .npz archive): it was written by another program, or is "
                   "damaged")
    fh.seek(0)
    try:
        with np.load(fh, allow_pickle=False) as z:
            header = _header(path, z)
            version = header.get("format_version")
            if not isinstance(version, int) or version < 1:
                raise _Bad(f"its header has no valid format version ({version!r}): the file is damaged")
            if version > FORMAT_VERSION:
                raise _Bad(f"it has format version {version}, written by bdtree_jax "
                           f"{header.get('library_version')}; this bdtree_jax ({_library_version()}) reads format "
                           f"versions up to {FORMAT_VERSION}: upgrade bdtree_jax to >= "
                           f"{header.get('library_version')}")
            if header.get("kind") != kind:
                raise _Bad(f"it holds a {header.get('kind')} ({header.get('type')}), not a {kind}")
            arrays = {int(name[1:]): z[name] for name in z.files if name[:1] == "a" and name[1:].isdigit()}
    except _Bad:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
        raise _Bad(f"it is damaged or truncated ({type(e).__name__}: {e})") from None
    content = header.get("content")
    ordered = [arrays[i] for i in range(len(arrays))] if sorted(arrays) == list(range(len(arrays))) else None
    if ordered is None or header.get("checksum") != _checksum(content, ordered):
        raise _Bad("its checksum does not match its content: the file was changed or damaged after it was written")
    try:
        return _decode(content, arrays)
    except _Bad:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as e:
        raise _Bad(f"its content is malformed ({type(e).__name__}: {e})") from None
