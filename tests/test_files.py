"""Checkpoints and saved posteriors are files that cannot run code when read (docs/files.md): every
unreadable file (empty, truncated, random bytes, another program's, the wrong kind, a newer format
version, a checksum mismatch, a pickle) raises BdtreeFileError naming the file and what to do; an
interrupted checkpoint write leaves the previous checkpoint; every posterior class round-trips to
identical predictions; old pickles load only behind allow_pickle=True."""

import dataclasses
import json
import os
import pathlib
import pickle
import re
import signal
import subprocess
import sys
import time
import zipfile

import jax
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax import _files, driver
from bdtree_jax._checkpoint import _read_checkpoint, _write_checkpoint
from bdtree_jax.posterior import PCFGPosterior, SMCPosterior

DATA = pathlib.Path(__file__).parent / "data"
RUN = dict(num_warmup=3, num_samples=4, num_chains=2, seed=0, progress=False)


@pytest.fixture(scope="module")
def iris():
    X, y = bd.datasets.load("iris")
    return X.iloc[::3].reset_index(drop=True), np.asarray(y)[::3]


@pytest.fixture(scope="module")
def hard(iris):
    X, y = iris
    return bd.sample(X, y, method="cgm", prior=bd.TreePrior(max_depth=3), **RUN)


@pytest.fixture()
def saved(hard, tmp_path):
    """A good posterior file and a good checkpoint file (of a finished run)."""
    post, ckpt = tmp_path / "post.npz", tmp_path / "run.ckpt"
    hard.save(post)
    _write_checkpoint(ckpt, "ident", 5, [{"x": np.arange(6.0).reshape(2, 3)}], {"key": jax.random.key(1)})
    return post, ckpt


# -- unreadable files ----------------------------------------------------------------------------------


def _rewrite(src, dst, change):
    """Copy the .npz ``src`` to ``dst`` with ``change(entries)`` applied (entries: name -> array)."""
    with np.load(src, allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    change(entries)
    with open(dst, "wb") as fh:
        np.savez(fh, **entries)


def _edit_header(**fields):
    def change(entries):
        header = json.loads(entries["header"].tobytes())
        header.update(fields)
        entries["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)

    return change


def _flip_an_array(entries):
    a = entries["a0"].copy()
    a.reshape(-1).view(np.uint8)[0] ^= 1
    entries["a0"] = a


def _bad_file(case, good, other, path):
    """Write the bad file ``case`` at ``path`` (``good``: a file of the kind being read; ``other``:
    a file of the other kind); returns the text the error must contain."""
    data = good.read_bytes()
    if case == "zero-byte":
        path.write_bytes(b"")
        return "empty"
    if case == "truncated":
        path.write_bytes(data[: len(data) // 2])
        return "damaged or truncated"
    if case == "random-bytes":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
        return "not a bdtree_jax file"
    if case == "random-after-zip-magic":
        path.write_bytes(b"PK\x03\x04" + np.random.default_rng(1).bytes(4096))
        return "damaged or truncated"
    if case == "json":
        path.write_text(json.dumps({"format": "bdtree_jax", "trees": [1, 2]}))
        return "not a bdtree_jax file"
    if case == "foreign-npz":
        with open(path, "wb") as fh:
            np.savez(fh, x=np.arange(3))
        return "written by another program"
    if case == "other-kind":
        path.write_bytes(other.read_bytes())
        return "not a"
    if case == "future-version":
        _rewrite(good, path, _edit_header(format_version=_files.FORMAT_VERSION + 1, library_version="9.0"))
        return "upgrade bdtree_jax to >= 9.0"
    if case == "checksum":
        _rewrite(good, path, _flip_an_array)
        return "checksum does not match"
    if case == "unknown-type":
        def rename_a_type(spec):  # the first registered type in the content becomes "os.system"
            if isinstance(spec, dict) and "type" in spec:
                spec["type"] = "os.system"
                return True
            children = spec.values() if isinstance(spec, dict) else spec if isinstance(spec, list) else ()
            return any(rename_a_type(c) for c in children)

        def change(entries):
            header = json.loads(entries["header"].tobytes())
            assert rename_a_type(header["content"])
            header["checksum"] = _files._checksum(header["content"], [entries[f"a{i}"] for i in range(len(entries) - 1)])
            entries["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)

        _rewrite(good, path, change)
        return "does not know"
    raise AssertionError(case)


CASES = ["zero-byte", "truncated", "random-bytes", "random-after-zip-magic", "json", "foreign-npz", "other-kind",
         "future-version", "checksum", "unknown-type"]


@pytest.mark.parametrize("case", CASES)
def test_bad_posterior_file_raises_the_clear_error(saved, tmp_path, case):
    post, ckpt = saved
    bad = tmp_path / f"bad-{case}.npz"
    what = _bad_file(case, post, ckpt, bad)
    with pytest.raises(bd.BdtreeFileError, match=re.escape(str(bad))) as err:
        bd.Posterior.load(bad)
    assert what in str(err.value)
    assert "upgrade" in str(err.value) or "Re-run the fit" in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("case", CASES)
def test_bad_checkpoint_file_raises_the_clear_error(saved, tmp_path, case):
    post, ckpt = saved
    bad = tmp_path / f"bad-{case}.ckpt"
    what = _bad_file(case, ckpt, post, bad)
    with pytest.raises(bd.BdtreeFileError, match=re.escape(str(bad))) as err:
        _read_checkpoint(bad, "ident")
    assert what in str(err.value)
    assert "Delete it" in str(err.value) and "--fresh" in str(err.value)


def test_run_chains_names_a_corrupt_checkpoint_before_compiling(tmp_path, monkeypatch):
    """The driver reads the checkpoint before building any program: a damaged one is reported
    at once, with its path."""
    from bdtree_jax.kernels.base import SamplingAlgorithm

    def never(*args):
        raise AssertionError("compiled or ran the sampler")

    algorithm = SamplingAlgorithm(init=never, step=never, trace=never)
    path = tmp_path / "run.ckpt"
    path.write_bytes(b"\x80\x05 an old pickle")
    with pytest.raises(bd.BdtreeFileError, match=re.escape(str(path)) + ".*pickle.*Delete it"):
        driver.run_chains(algorithm, {"x": np.zeros(3)}, key=jax.random.key(0), num_chains=1, num_iterations=2,
                          checkpoint=path)


def test_checkpoint_of_another_run_is_ignored(saved):
    _, ckpt = saved
    assert _read_checkpoint(ckpt, "another run") is None
    got = _read_checkpoint(ckpt, "ident")
    assert got["start"] == 5 and got["ident"] == "ident"
    np.testing.assert_array_equal(got["chunks"][0]["x"], np.arange(6.0).reshape(2, 3))
    restored = driver._from_host(got["states"])
    assert jax.dtypes.issubdtype(restored["key"].dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(jax.random.key(1)))


def test_posterior_load_names_the_class_to_use(tmp_path):
    grid = bd.make_split_grid(np.arange(6.0).reshape(3, 2))
    path = tmp_path / "p.npz"
    _files.write_file(path, "posterior", grid)
    with pytest.raises(bd.BdtreeFileError, match="holds a SplitGrid, not a Posterior"):
        bd.Posterior.load(path)


def test_what_the_format_cannot_store_is_named_before_writing(tmp_path):
    path = tmp_path / "p.ckpt"
    with pytest.raises(TypeError, match=r"dict\['states'\]\['f'\] is a builtins.function"):
        _files.write_file(path, "checkpoint", {"states": {"f": lambda: 0}})
    assert not os.listdir(tmp_path)


# -- interrupted writes --------------------------------------------------------------------------------


def test_a_checkpoint_write_interrupted_half_way_leaves_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "run.ckpt"
    _write_checkpoint(path, "ident", 1, [np.zeros(4)], None)
    real_write = _files._write_npz

    def half_then_killed(fh, entries, compress):
        real_write(fh, entries, compress)
        fh.truncate(fh.tell() // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(_files, "_write_npz", half_then_killed)
    with pytest.raises(KeyboardInterrupt):
        _write_checkpoint(path, "ident", 2, [np.ones(4)], None)
    monkeypatch.undo()
    got = _read_checkpoint(path, "ident")
    assert got["start"] == 1
    np.testing.assert_array_equal(got["chunks"][0], np.zeros(4))
    assert sorted(os.listdir(tmp_path)) == ["run.ckpt"]  # the temporary file is gone


_WRITER = """
import sys, numpy as np
from bdtree_jax._checkpoint import _write_checkpoint
path, i = sys.argv[1], 0
big = np.zeros(8_000_000)
while True:
    i += 1
    _write_checkpoint(path, "ident", i, [big + i], None)
    print(i, flush=True)
"""


def test_a_checkpoint_writer_killed_at_any_moment_leaves_a_loadable_checkpoint(tmp_path):
    """A process writing 64 MB checkpoints in a loop is killed (SIGKILL) in the middle of a
    write; the checkpoint on disk is whole and is the last one the process finished."""
    path = tmp_path / "run.ckpt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(bd.__file__))] + sys.path))
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    with proc:
        try:
            done = int(proc.stdout.readline())  # one checkpoint finished
            deadline = time.monotonic() + 30
            while not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]:  # the next one is being written
                assert time.monotonic() < deadline, "the writer never started its next checkpoint"
                time.sleep(0.001)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finished = [done] + [int(line) for line in proc.stdout.read().split()]
    got = _read_checkpoint(path, "ident")
    assert got["start"] in finished[-2:]
    assert got["chunks"][0][0] == got["start"]


# -- pickles ---------------------------------------------------------------------------------------------


class _Exploit:
    """Unpickling it creates the marker file: a stand-in for any code a pickle may run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_a_pickle_that_runs_code_is_not_unpickled(tmp_path):
    path, marker = tmp_path / "post.pkl", tmp_path / "marker"
    path.write_bytes(pickle.dumps({"trees": _Exploit(str(marker))}, protocol=pickle.HIGHEST_PROTOCOL))
    with pytest.raises(bd.BdtreeFileError, match=re.escape(str(path)) + ".*allow_pickle=True"):
        bd.Posterior.load(path)
    with pytest.raises(bd.BdtreeFileError):
        bd.SoftTreePosterior.load(path)
    with pytest.raises(bd.BdtreeFileError):
        bd.BARTPosterior.load(path)
    assert not marker.exists()
    # the same file does run its code when unpickled: what allow_pickle=True warns about
    with pytest.warns(bd.PickleFileWarning, match="runs any code"), pytest.raises(TypeError):
        bd.Posterior.load(path, allow_pickle=True)
    assert marker.exists()


def test_an_old_pickled_posterior_loads_with_allow_pickle(hard, iris, tmp_path):
    """bdtree_jax 0.1's save: a pickle of the fields, the trees as a plain tuple."""
    X, _ = iris
    state = {k: v for k, v in hard.__dict__.items() if not k.startswith("_")}
    state["trees"] = tuple(None if a is None else np.asarray(a) for a in hard.trees)
    path = tmp_path / "old.pkl"
    path.write_bytes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    with pytest.warns(bd.PickleFileWarning):
        old = bd.Posterior.load(path, allow_pickle=True)
    np.testing.assert_array_equal(old.predict_proba(X), hard.predict_proba(X))
    new = tmp_path / "new.npz"
    old.save(new)
    np.testing.assert_array_equal(bd.Posterior.load(new).predict_proba(X), hard.predict_proba(X))


# -- round trips -------------------------------------------------------------------------------------------


def _same(x, y, where="posterior"):
    """``x`` and ``y`` equal all the way down: the same types, arrays with their dtypes and bytes."""
    assert type(x) is type(y), where
    if dataclasses.is_dataclass(x):
        for f in dataclasses.fields(x):
            _same(getattr(x, f.name), getattr(y, f.name), f"{where}.{f.name}")
    elif isinstance(x, dict):
        assert list(x) == list(y), where
        for k in x:
            _same(x[k], y[k], f"{where}[{k!r}]")
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for i, (u, v) in enumerate(zip(x, y)):
            _same(u, v, f"{where}[{i}]")
    elif isinstance(x, (np.ndarray, np.generic)):
        assert x.dtype == y.dtype and x.shape == y.shape, where
        if x.dtype == object:
            _same(list(x.flat), list(y.flat), where)
        else:
            assert x.tobytes() == y.tobytes(), where
    else:
        assert x == y or x != x and y != y, where


def _round_trip(post, tmp_path):
    path = tmp_path / f"{type(post).__name__}.npz"
    post.save(path)
    back = type(post).load(path)
    _same(post, back)
    _same(post, bd.load(path))  # the reader of every file gives the same
    with zipfile.ZipFile(path) as z:  # nothing pickled: every entry loads without pickle
        assert all(n.endswith(".npy") for n in z.namelist())
    return back


def test_hard_posterior_round_trip(hard, iris, tmp_path):
    X, _ = iris
    back = _round_trip(hard, tmp_path)
    np.testing.assert_array_equal(back.predict_proba(X), hard.predict_proba(X))
    assert back.tree_strings() == hard.tree_strings()
    assert bd.Posterior.load(tmp_path / "Posterior.npz").predict(X).tolist() == hard.predict(X).tolist()


@pytest.mark.slow
def test_categorical_posterior_round_trip(tmp_path):
    X, y = bd.datasets.load("penguins")
    X, y = X.iloc[::4].reset_index(drop=True), np.asarray(y)[::4]
    post = bd.sample(X, y, method="cgm", prior=bd.TreePrior(max_depth=3), **RUN)
    assert isinstance(post.trees, bd.tree.MixedTree)
    back = _round_trip(post, tmp_path)
    assert isinstance(back.trees, bd.tree.MixedTree)
    np.testing.assert_array_equal(back.predict_proba(X), post.predict_proba(X))
    assert back.tree_text() == post.tree_text()


@pytest.mark.xla_optimized
@pytest.mark.slow  # (tests/test_pcfg.py's default test saves and loads a PCFG posterior too)
def test_pcfg_posterior_round_trip(iris, tmp_path):
    X, y = iris
    pcfg = bd.sample(X, y, method="pcfg", prior=bd.TreePrior(max_depth=3), **RUN)
    back = _round_trip(pcfg, tmp_path)
    assert isinstance(bd.Posterior.load(tmp_path / "PCFGPosterior.npz"), PCFGPosterior)
    np.testing.assert_array_equal(back.predictive(X), pcfg.predictive(X))
    np.testing.assert_array_equal(back.predict_draws(X), pcfg.predict_draws(X))


def test_smc_posterior_round_trip(iris, tmp_path):
    X, y = iris
    smc = bd.sample(X, y, method="smc", prior=bd.TreePrior(max_depth=3), **RUN)
    back = _round_trip(smc, tmp_path)
    assert isinstance(back, SMCPosterior)
    np.testing.assert_array_equal(back.predict_proba(X), smc.predict_proba(X))
    assert back.log_evidence == smc.log_evidence


@pytest.mark.slow
def test_soft_posterior_round_trip(iris, tmp_path):
    X, y = iris
    post = bd.sample(X.to_numpy(), y, method="hmc-df", prior=bd.TreePrior(max_depth=2), **RUN)
    back = _round_trip(post, tmp_path)
    np.testing.assert_array_equal(back.predict_proba(X.to_numpy()), post.predict_proba(X.to_numpy()))
    with pytest.raises(bd.BdtreeFileError, match="holds a SoftTreePosterior, not a Posterior"):
        bd.Posterior.load(tmp_path / "SoftTreePosterior.npz")


def test_bart_posteriors_round_trip(iris, tmp_path):
    X, y = iris
    reg = bd.BARTRegressor(num_trees=3, leaf_dtype="bfloat16", **RUN).fit(X.iloc[:, 1:], X.iloc[:, 0]).posterior_
    back = _round_trip(reg, tmp_path)
    assert back.leaf_values.dtype == reg.leaf_values.dtype
    np.testing.assert_array_equal(back.predict(X.iloc[:, 1:]), reg.predict(X.iloc[:, 1:]))
    clf = bd.BARTClassifier(num_trees=3, **RUN).fit(X, y == y[0]).posterior_
    back = _round_trip(clf, tmp_path)
    np.testing.assert_array_equal(back.predict_proba(X), clf.predict_proba(X))


# -- issue #38: reading is bounded, values are checked ------------------------------------------------


def _replace_entry(src, dst, name, data: bytes, compress=zipfile.ZIP_STORED):
    """Copy the archive ``src`` to ``dst`` with the entry ``name`` (e.g. "a0.npy") holding ``data``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            body = data if info.filename == name else zin.read(info)
            zout.writestr(info.filename, body, compress_type=compress if info.filename == name else info.compress_type)


def _npy_header(shape, dtype) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def test_an_entry_declaring_2_42_floats_is_refused_without_allocating(saved, tmp_path):
    """A 128-byte entry whose .npy header declares 2**42 float64 (32 TiB): bdtree_jax 6c1851c
    (np.load) tried to allocate them (MemoryError); now its size is checked against the entry's."""
    post, _ = saved
    bad = tmp_path / "huge.npz"
    header = _npy_header((2**42,), np.float64)
    assert len(header) <= 128
    _replace_entry(post, bad, "a0.npy", header)
    with pytest.raises(bd.BdtreeFileError, match=r"declares a float64 array of shape \(4398046511104,\).*holds 0 bytes"):
        bd.Posterior.load(bad)


def test_a_deflated_entry_larger_than_its_header_declares_is_refused(saved, tmp_path):
    """A deflated entry whose .npy header declares 10 floats but which expands to 64 MB."""
    post, _ = saved
    bad = tmp_path / "bomb.npz"
    _replace_entry(post, bad, "a0.npy", _npy_header((10,), np.float64) + bytes(64 * 2**20), zipfile.ZIP_DEFLATED)
    assert bad.stat().st_size < 2**20
    with pytest.raises(bd.BdtreeFileError, match=r"declares a float64 array of shape \(10,\)"):
        bd.Posterior.load(bad)


def _large_zero_entry(saved, tmp_path, mb: int):
    """The posterior file with its first array replaced by ``mb`` MB of deflated zeros (a header
    that tells the truth), the checksum left as it was (so it no longer matches)."""
    post, _ = saved
    with np.load(post) as z:
        dtype = z["a0"].dtype
    n = mb * 2**20 // dtype.itemsize
    bad = tmp_path / "zeros.npz"
    _replace_entry(post, bad, "a0.npy", _npy_header((n,), dtype) + bytes(n * dtype.itemsize), zipfile.ZIP_DEFLATED)
    return bad


def test_the_checksum_is_verified_before_any_large_array_is_built(saved, tmp_path):
    """A small file whose deflated entry holds 96 MB and whose checksum does not match: rejected
    with at most a few MB allocated (6c1851c built every array first, then checked the checksum)."""
    import tracemalloc

    bad = _large_zero_entry(saved, tmp_path, 96)
    assert bad.stat().st_size < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(bd.BdtreeFileError, match="checksum does not match"):
            bd.Posterior.load(bad)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak


def test_a_file_declaring_more_than_the_cap_is_refused(saved, tmp_path, monkeypatch):
    bad = _large_zero_entry(saved, tmp_path, 8)
    monkeypatch.setenv(_files.MAX_BYTES_ENV, str(2**20))
    with pytest.raises(bd.BdtreeFileError, match=r"more than the 1,048,576 bytes a file may hold here"):
        bd.Posterior.load(bad)
    monkeypatch.setenv(_files.MAX_BYTES_ENV, str(2**30))
    with pytest.raises(bd.BdtreeFileError, match="checksum does not match"):
        bd.Posterior.load(bad)


def _unchecked(cls, **fields):
    """An instance of the frozen dataclass ``cls`` with ``fields``, its validation bypassed."""
    obj = object.__new__(cls)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for k, v in {**defaults, **fields}.items():
        object.__setattr__(obj, k, v)
    return obj


def test_dataclasses_read_back_are_validated(hard, tmp_path):
    """A posterior whose TreePrior says max_depth=10**9, alpha=7.5 (a value its constructor
    refuses) is written by the ordinary writer; 6c1851c loaded it, now it is a BdtreeFileError."""
    path = tmp_path / "bad_prior.npz"
    for fields, match in ((dict(max_depth=10**9, alpha=7.5), r"\(max_depth=1000000000 is over the cap of 14"), (dict(alpha=7.5), r"\(alpha must be in \(0, 1\)")):
        bad = dataclasses.replace(hard)
        object.__setattr__(bad, "prior", _unchecked(bd.TreePrior, **fields))
        bad.save(path)
        with pytest.raises(bd.BdtreeFileError, match=r"its TreePrior holds an invalid value " + match):
            bd.Posterior.load(path)
    # a leaf model (no __post_init__: the checks of build_problem) and a BART configuration
    lik = object.__new__(bd.NormalMeanShift)
    for k, v in dict(nu=-1.0, lam=1.0, a=1.0, mu_bar=0.0).items():
        object.__setattr__(lik, k, v)
    config = bd.kernels.bart.BARTConfig(n_trees=3)
    object.__setattr__(config, "max_depth", 10**9)
    for obj, match in ((lik, r"NormalMeanShift holds an invalid value \(nu must be a finite number > 0"),
                       (config, r"BARTConfig holds an invalid value \(max_depth must be")):
        _write_checkpoint(tmp_path / "c.ckpt", "ident", 1, [], {"x": obj})
        with pytest.raises(bd.BdtreeFileError, match=match):
            _read_checkpoint(tmp_path / "c.ckpt", "ident")


# -- issue #38: compact BART posterior files ---------------------------------------------------------------


def test_bart_posterior_file_is_compact(iris, tmp_path):
    """Trees as bits and their splits' rules, leaf values only at leaves, deflated.  The 3-tree
    posterior of tests/data (written by 6c1851c) with its 2 x 4 draws repeated to 2 x 40: its padded
    trees and leaf values hold 2 * 40 * 3 * 63 slots * 7 bytes = 106 kB (6c1851c wrote them whole);
    the file's arrays now hold under a fifth of that before deflating, and it predicts the same
    after loading.  (A fit of n = 250 rows, 200 trees, 1,000 draws: 100.9 MB before, 2.2 MB now.)"""
    X, _ = iris
    old = bd.BARTPosterior.load(DATA / "v1_bart_regressor.npz")
    tile = lambda a: np.concatenate([a] * 10, axis=1)
    post = dataclasses.replace(old, trees=jax.tree.map(tile, old.trees), leaf_values=tile(old.leaf_values),
                               stats={k: tile(v) for k, v in old.stats.items()})
    path = tmp_path / "bart.npz"
    post.save(path)
    padded = sum(a.nbytes for a in post.trees) + post.leaf_values.nbytes
    assert padded == 2 * 40 * 3 * 63 * 7
    with zipfile.ZipFile(path) as z:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
        trees = json.loads(np.load(path)["header"].tobytes())["content"]["fields"][:2]
        entries = [int(i) for i in re.findall(r'"i": (\d+)', json.dumps(trees))]  # trees and leaf values
        stored = sum(z.getinfo(f"a{i}.npy").file_size for i in entries)
    assert stored < padded / 5, (stored, padded)
    assert path.stat().st_size < padded / 2, (path.stat().st_size, padded)  # 6c1851c: 1.07 x padded
    header = json.loads(np.load(path)["header"].tobytes())
    assert header["format_version"] == 2
    back = bd.BARTPosterior.load(path)
    _same(post, back)
    np.testing.assert_array_equal(back.predict(X.iloc[:, 1:]), post.predict(X.iloc[:, 1:]))



def test_bart_files_of_format_version_1_still_load(iris, tmp_path):
    """Files written by bdtree_jax 6c1851c (format version 1: padded trees, stored) load, predict
    what they predicted then, and save again as version 2 to the same posterior."""
    X, _ = iris
    expected = json.loads((DATA / "v1_bart_expected.json").read_text())
    for name, cls in (("regressor", bd.BARTPosterior), ("classifier", bd.BARTClassifierPosterior)):
        path = DATA / f"v1_bart_{name}.npz"
        assert json.loads(np.load(path)["header"].tobytes())["format_version"] == 1
        old = cls.load(path)
        assert type(old) is cls
        got = old.predict(X.iloc[:, 1:]) if name == "regressor" else old.predict_proba(X)
        np.testing.assert_allclose(got, expected["regressor_predict" if name == "regressor" else "classifier_proba"],
                                   rtol=1e-6, atol=1e-9)
        again = _round_trip(old, tmp_path)
        assert json.loads(np.load(tmp_path / f"{cls.__name__}.npz")["header"].tobytes())["format_version"] == 2
        _same(old, again)


def test_load_reads_checkpoints_and_names_what_it_cannot_read(saved, tmp_path):
    post, ckpt = saved
    assert type(bd.load(post)) is bd.Posterior
    got = bd.load(ckpt)
    assert got["ident"] == "ident" and got["start"] == 5
    np.testing.assert_array_equal(got["chunks"][0]["x"], np.arange(6.0).reshape(2, 3))
    with pytest.raises(bd.BdtreeFileError, match=r"holds a checkpoint \(dict\), not a posterior: read it with bd.load"):
        bd.Posterior.load(ckpt)
    pickled = tmp_path / "old.pkl"
    pickled.write_bytes(pickle.dumps({"trees": None}))
    with pytest.raises(bd.BdtreeFileError, match=r"is a pickle .*bd.Posterior.load\(path, allow_pickle=True\)"):
        bd.load(pickled)
    for case in ("random-bytes", "foreign-npz", "checksum"):
        expected = _bad_file(case, post, ckpt, tmp_path / case)
        with pytest.raises(bd.BdtreeFileError, match=expected):
            bd.load(tmp_path / case)
