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
    real_savez = np.savez

    def half_then_killed(fh, **entries):
        real_savez(fh, **entries)
        fh.truncate(fh.tell() // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(_files.np, "savez", half_then_killed)
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
    reg = bd.BARTRegressor(n_trees=3, leaf_dtype="bfloat16", **RUN).fit(X.iloc[:, 1:], X.iloc[:, 0]).posterior_
    back = _round_trip(reg, tmp_path)
    assert back.leaf_values.dtype == reg.leaf_values.dtype
    np.testing.assert_array_equal(back.predict(X.iloc[:, 1:]), reg.predict(X.iloc[:, 1:]))
    clf = bd.BARTClassifier(n_trees=3, **RUN).fit(X, y == y[0]).posterior_
    back = _round_trip(clf, tmp_path)
    np.testing.assert_array_equal(back.predict_proba(X), clf.predict_proba(X))
