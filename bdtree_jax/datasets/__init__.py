"""Bundled benchmark datasets and synthetic data generators.

Real datasets (small UCI classification sets, CC BY 4.0; and three tables with categorical
columns and missing values: penguins, airquality, diamonds) are shipped as CSV files in
``bdtree_jax/datasets/data``; see ``data/README.md`` there for sources, licences, citations and
known quirks.  Every function returns freshly built objects: nothing mutable is cached, so
callers may modify the results freely.

- :func:`load` -- a whole dataset as ``(X, y)``.
- :func:`load_frame` -- a bundled table as shipped (target column included).
- :func:`load_split` -- the exact train/test splits used by the RJHMC-Tree paper.
- :func:`make_cgm` / :func:`cgm_true_function` -- the CGM synthetic regression data.
- :func:`make_xor` -- the hidden-XOR (parity) classification benchmark.
"""

from __future__ import annotations

import numbers
from importlib.resources import files

import numpy as np
import pandas as pd

from .._renamed import accepts_renamed

__all__ = [
    "DATASETS",
    "MIXED",
    "REGRESSION",
    "SPLITS",
    "load",
    "load_frame",
    "load_split",
    "make_cgm",
    "cgm_true_function",
    "make_xor",
    "make_hypercube",
]

_FILES: dict[str, str] = {
    "iris": "iris.csv",
    "wine": "wine.csv",
    "bcw": "breast_cancer_wisconsin_original.csv",
    "raisin": "raisin.csv",
    "haberman": "haberman.csv",
    "vertebral": "vertebral_column_2c.csv",
    "caesarian": "caesarian.csv",
    "waveform": "waveform.csv",
    "penguins": "penguins.csv",
    "airquality": "airquality.csv",
    "diamonds": "diamonds.csv.gz",
}

DATASETS: tuple[str, ...] = tuple(_FILES)
"""Names accepted by :func:`load` and :func:`load_frame`."""

#: The target column of the tables with categorical columns and missing values (the others' is
#: ``"target"``).
_MIXED_TARGET = {"penguins": "species", "airquality": "Ozone", "diamonds": "price"}
MIXED: tuple[str, ...] = tuple(_MIXED_TARGET)
"""The tables with categorical (string) columns and/or missing values, returned as published."""
REGRESSION: tuple[str, ...] = ("airquality", "diamonds")
"""The datasets of :data:`DATASETS` whose target is a real response (the others: class labels)."""

#: Level order of diamonds' graded columns: ggplot2's ordered factors (cut and clarity worst to
#: best, color from D, the best, to J).
_DIAMOND_GRADES = {
    "cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
    "color": ["D", "E", "F", "G", "H", "I", "J"],
    "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"],
}

SPLITS: tuple[str, ...] = ("iris", "bcw", "wine", "raisin", "cgm")
"""Names accepted by :func:`load_split`."""

_TARGET = "target"
_CGM_NOISE_SD = 0.2


def _read_csv(*parts: str) -> pd.DataFrame:
    """Read a bundled CSV (path relative to the ``data`` folder) into a new DataFrame."""
    resource = files(__name__) / "data"
    for part in parts:
        resource = resource / part
    with resource.open("rb") as fh:
        return pd.read_csv(fh, compression="gzip" if parts[-1].endswith(".gz") else None)


def _split_xy(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    # a copy: under pandas 2.x the popped column still points at `df`, and a caller's
    # `y.iloc[0] = ...` would raise SettingWithCopyWarning
    y = df.pop(_TARGET).copy()
    y.name = _TARGET
    return df, y


def _check_name(name: object, valid: tuple[str, ...], what: str) -> str:
    if not isinstance(name, str) or name not in valid:
        raise ValueError(f"unknown {what} {name!r}; valid names are: {', '.join(valid)}")
    return name


def _check_int(value: object, arg: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{arg} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{arg} must be >= {minimum}, got {value}")
    return value


def load(name: str) -> tuple[pd.DataFrame, pd.Series]:
    """Load a bundled dataset.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`: the UCI classification sets ``"iris"``, ``"wine"``, ``"bcw"``
        (Breast Cancer Wisconsin, original), ``"raisin"``, ``"haberman"``, ``"vertebral"``
        (Vertebral Column, 2 classes), ``"caesarian"``, ``"waveform"``; and the tables with
        categorical columns and missing values (:data:`MIXED`):

        * ``"penguins"`` (344 rows): ``y`` is ``species`` (Adelie / Chinstrap / Gentoo);
          ``X`` has the string columns ``island`` and ``sex`` (11 missing) and the numeric
          ``bill_length_mm``, ``bill_depth_mm``, ``flipper_length_mm``, ``body_mass_g`` (2
          missing each) and ``year``.
        * ``"airquality"`` (116 rows: the 37 rows without ``Ozone`` dropped): ``y`` is ``Ozone``
          (regression); ``X`` is ``Solar.R`` (5 missing), ``Wind``, ``Temp``, ``Month``, ``Day``.
        * ``"diamonds"`` (53,940 rows): ``y`` is ``price`` (regression); ``X`` has ``carat``,
          ``depth``, ``table``, ``x``, ``y``, ``z`` and the graded ``cut``, ``color``, ``clarity``
          as ordered pandas categoricals in ggplot2's level orders (cut Fair .. Ideal, color
          D .. J, clarity I1 .. IF).

    Returns
    -------
    X : pandas.DataFrame, shape (n, d)
        Feature columns with the CSV's names, in the source's row order (``raisin`` and
        ``vertebral`` are grouped by class: shuffle before splitting).  The UCI sets' columns
        are numeric and complete; the :data:`MIXED` tables keep their string columns and
        missing values (NaN) as published (docs/categorical-missing.md).
    y : pandas.Series, shape (n,)
        The target: for the UCI sets class labels named ``"target"``, with values exactly as in
        the CSV (e.g. strings ``"Iris-setosa"`` for iris, integer codes 2/4 for bcw); for the
        :data:`MIXED` tables the column named above.

    Raises
    ------
    ValueError
        If `name` is not one of :data:`DATASETS`.

    Notes
    -----
    ``"bcw"`` drops the 16 rows with a missing ``bare_nuclei`` value, leaving the usual 683
    complete rows (444 benign / 239 malignant), and returns ``bare_nuclei`` as integers.
    ``"iris"`` is UCI's ``iris.data`` including its two documented transcription errors
    (rows 35 and 38), which scikit-learn's copy corrects.

    Examples
    --------
    >>> from bdtree_jax.datasets import load
    >>> X, y = load("iris")
    >>> X.shape
    (150, 4)
    >>> y.value_counts().sort_index().tolist()
    [50, 50, 50]
    """
    name = _check_name(name, DATASETS, "dataset")
    df = load_frame(name)
    if name in _MIXED_TARGET:
        y = df.pop(_MIXED_TARGET[name])
        keep = y.notna().to_numpy()
        return df[keep].reset_index(drop=True), y[keep].reset_index(drop=True)
    if name == "bcw":
        df = df.dropna(subset=["bare_nuclei"]).reset_index(drop=True)
        df["bare_nuclei"] = df["bare_nuclei"].astype(np.int64)
    return _split_xy(df)


def load_frame(name: str) -> pd.DataFrame:
    """A bundled table as shipped: every row and column, the target included (``"target"`` for
    the UCI sets, the column :func:`load` names for :data:`MIXED`), missing cells as NaN, string
    columns as strings (diamonds' ``cut``, ``color``, ``clarity``: ordered categoricals).

    Examples
    --------
    >>> from bdtree_jax.datasets import load_frame
    >>> df = load_frame("airquality")
    >>> df.shape, int(df["Ozone"].isna().sum())
    ((153, 6), 37)
    """
    name = _check_name(name, DATASETS, "dataset")
    df = _read_csv(_FILES[name])
    if name == "diamonds":
        for column, grades in _DIAMOND_GRADES.items():
            df[column] = pd.Categorical(df[column], categories=grades, ordered=True)
    return df


def load_split(name: str) -> tuple[pd.DataFrame, pd.Series, pd.DataFrame, pd.Series]:
    """Load the exact train/test split used in the RJHMC-Tree paper.

    Parameters
    ----------
    name : str
        One of :data:`SPLITS`: ``"iris"``, ``"bcw"``, ``"wine"``, ``"raisin"``, ``"cgm"``.

    Returns
    -------
    X_train : pandas.DataFrame, shape (n_train, d)
        Raw (unscaled) inputs in columns ``x0 .. x{d-1}``.
    y_train : pandas.Series, shape (n_train,)
        Targets named ``"target"``: class indices ``0..K-1`` as int64 for classification, the
        real response as float64 for ``"cgm"``.
    X_test : pandas.DataFrame, shape (n_test, d)
        As `X_train`.
    y_test : pandas.Series, shape (n_test,)
        As `y_train`.

    Raises
    ------
    ValueError
        If `name` is not one of :data:`SPLITS`.

    Notes
    -----
    Sizes (train / test / d): iris 105/45/4, bcw 478/205/9 (complete rows; 2->0, 4->1),
    wine 142/36/13, raisin 630/270/7, cgm 800/800/2.  The paper scales every input to
    ``[0, 1]`` using the training set's min and max before fitting; this is *not* done here.

    Examples
    --------
    >>> from bdtree_jax.datasets import load_split
    >>> X_train, y_train, X_test, y_test = load_split("wine")
    >>> X_train.shape, X_test.shape
    ((142, 13), (36, 13))
    >>> sorted(y_train.unique().tolist())
    [0, 1, 2]
    """
    name = _check_name(name, SPLITS, "split")
    dtype = np.float64 if name == "cgm" else np.int64
    out: list[pd.DataFrame | pd.Series] = []
    for part in ("train", "test"):
        X, y = _split_xy(_read_csv("paper_splits", f"{name}_{part}.csv"))
        out += [X, y.astype(dtype)]
    X_train, y_train, X_test, y_test = out
    return X_train, y_train, X_test, y_test


def cgm_true_function(X) -> np.ndarray:
    """Noise-free mean function of the CGM synthetic data.

    The true regression tree has five leaves::

        x1 <= 4.5 and x0 <= 3.5         -> 1
        x1 <= 4.5 and 3.5 < x0 <= 7.5   -> 5
        x1 <= 4.5 and x0 > 7.5          -> 8
        x1 > 4.5  and x0 <= 5.5         -> 8
        x1 > 4.5  and x0 > 5.5          -> 2

    Parameters
    ----------
    X : array_like or pandas.DataFrame, shape (n, 2)
        Inputs; column 0 is ``x0`` and column 1 is ``x1`` (DataFrames are used positionally).

    Returns
    -------
    numpy.ndarray of float64, shape (n,)
        ``f(x)`` for every row.

    Raises
    ------
    ValueError
        If `X` is not two-dimensional with exactly 2 columns.

    Examples
    --------
    >>> from bdtree_jax.datasets import cgm_true_function
    >>> cgm_true_function([[1, 1], [5, 1], [9, 1], [1, 9], [9, 9]]).tolist()
    [1.0, 5.0, 8.0, 8.0, 2.0]
    """
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"X must have shape (n, 2), got {arr.shape}")
    x0, x1 = arr[:, 0], arr[:, 1]
    low = np.where(x0 <= 3.5, 1.0, np.where(x0 <= 7.5, 5.0, 8.0))
    high = np.where(x0 <= 5.5, 8.0, 2.0)
    return np.where(x1 <= 4.5, low, high)


def make_cgm(n: int, seed=0) -> tuple[pd.DataFrame, pd.Series]:
    """Simulate the CGM synthetic regression data of the RJHMC-Tree paper.

    ``x0`` and ``x1`` are iid uniform on the integers ``{1, ..., 10}`` and
    ``y = f(x) + eps`` with ``eps ~ N(0, 0.2**2)`` and ``f`` = :func:`cgm_true_function`.

    Parameters
    ----------
    n : int
        Number of rows, ``n >= 1``.
    seed : int, numpy.random.Generator or None, default 0
        Passed to :func:`numpy.random.default_rng`. The same seed gives the same data.

    Returns
    -------
    X : pandas.DataFrame, shape (n, 2)
        Columns ``x0``, ``x1``: integer values stored as float64 (as in
        ``load_split("cgm")``).
    y : pandas.Series of float64, shape (n,)
        Noisy response, named ``"target"``.

    Raises
    ------
    ValueError
        If `n` is not an integer ``>= 1``.

    Examples
    --------
    >>> from bdtree_jax.datasets import make_cgm, cgm_true_function
    >>> X, y = make_cgm(1000, seed=1)
    >>> X.shape
    (1000, 2)
    >>> bool(abs((y - cgm_true_function(X)).std() - 0.2) < 0.03)
    True
    """
    n = _check_int(n, "n", 1)
    rng = np.random.default_rng(seed)
    x = rng.integers(1, 11, size=(n, 2)).astype(np.float64)
    noise = rng.normal(0.0, _CGM_NOISE_SD, size=n)
    X = pd.DataFrame(x, columns=["x0", "x1"])
    y = pd.Series(cgm_true_function(x) + noise, name=_TARGET)
    return X, y


@accepts_renamed("n_features", "n_relevant")
def make_xor(
    n: int, num_features: int = 20, num_relevant: int = 4, seed=0
) -> tuple[pd.DataFrame, pd.Series]:
    """Simulate the hidden-XOR (parity) benchmark of the BCART-PCFG paper.

    Every feature is iid Bernoulli(0.5); the label is the XOR (parity) of the first
    `num_relevant` features, and the remaining features are pure noise.  No single split is
    informative, so greedy trees struggle while a good tree posterior sampler should not.

    Parameters
    ----------
    n : int
        Number of rows, ``n >= 1``.
    num_features : int, default 20
        Number of features ``d >= 1``.
    num_relevant : int, default 4
        Number of leading features entering the parity, ``1 <= num_relevant <= num_features``.
    seed : int, numpy.random.Generator or None, default 0
        Passed to :func:`numpy.random.default_rng`.

    Returns
    -------
    X : pandas.DataFrame of int64, shape (n, num_features)
        0/1 features in columns ``x0 .. x{d-1}``.
    y : pandas.Series of int64, shape (n,)
        ``X[:, :num_relevant].sum(axis=1) % 2``, named ``"target"``.

    Raises
    ------
    ValueError
        If an argument is not an integer or out of range (the message names it).

    Examples
    --------
    >>> from bdtree_jax.datasets import make_xor
    >>> X, y = make_xor(8, num_features=5, num_relevant=2, seed=0)
    >>> X.shape
    (8, 5)
    >>> bool(((X["x0"] ^ X["x1"]) == y).all())
    True
    """
    n = _check_int(n, "n", 1)
    num_features = _check_int(num_features, "num_features", 1)
    num_relevant = _check_int(num_relevant, "num_relevant", 1)
    if num_relevant > num_features:
        raise ValueError(
            f"num_relevant must be <= num_features, got num_relevant={num_relevant}, "
            f"num_features={num_features}"
        )
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2, size=(n, num_features), dtype=np.int64)
    X = pd.DataFrame(x, columns=[f"x{j}" for j in range(num_features)])
    y = pd.Series(x[:, :num_relevant].sum(axis=1) % 2, name=_TARGET, dtype=np.int64)
    return X, y


@accepts_renamed("n_features", "n_per_vertex")
def make_hypercube(
    num_features: int = 3, num_per_vertex: int = 10, x_noise: float = 0.1, f_scale: float = 3.0, seed=0
) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    """Simulate the hypercube-D mixing benchmark of Particle Gibbs for BART (Lakshminarayanan et
    al. 2015; results in ``docs/benchmarks.md``).

    ``2**D`` clusters of ``num_per_vertex`` rows at the vertices of ``{-1, +1}^D`` with Gaussian
    input noise (sd ``x_noise``); every vertex has a value ``f(v) ~ N(0, f_scale**2)`` and the
    response is ``y = f(vertex)`` with **no** noise.  Only a tree that separates all ``2**D``
    vertices fits the data; local MCMC moves tend to stall before reaching one.

    Returns
    -------
    X : DataFrame (2**D * num_per_vertex, D), columns ``x0 ..``.
    y : Series of float64, the response ``f(vertex)``, named ``"target"``.
    vertex : Series of int64, each row's vertex id (the bits of its sign pattern), named ``"vertex"``.

    Examples
    --------
    >>> from bdtree_jax.datasets import make_hypercube
    >>> X, y, vertex = make_hypercube(3, num_per_vertex=2, seed=0)
    >>> X.shape, int(vertex.nunique())
    ((16, 3), 8)
    """
    D = _check_int(num_features, "num_features", 1)
    m = _check_int(num_per_vertex, "num_per_vertex", 1)
    for name, v in (("x_noise", x_noise), ("f_scale", f_scale)):
        if not (isinstance(v, (int, float, np.floating)) and np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0; got {v!r}.")
    rng = np.random.default_rng(seed)
    vertex = np.repeat(np.arange(2**D), m)
    signs = 2.0 * ((vertex[:, None] >> np.arange(D)) & 1) - 1.0
    f = rng.normal(0.0, f_scale, size=2**D)
    X = pd.DataFrame(signs + rng.normal(0.0, x_noise, size=signs.shape), columns=[f"x{j}" for j in range(D)])
    return X, pd.Series(f[vertex], name=_TARGET), pd.Series(vertex.astype(np.int64), name="vertex")
