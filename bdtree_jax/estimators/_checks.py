"""What every estimator here records about its training inputs and checks again at prediction."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_is_fitted

from ..features import SUPPORTS_CATEGORICAL


class _FeatureChecks:
    """What every fitted estimator here records about its training inputs (``n_features_in_``,
    ``feature_names_in_``) and checks again at prediction (scikit-learn's conventions), and the
    input tags it declares."""

    def _sampler_name(self) -> str:
        """The name :data:`~bdtree_jax.features.SUPPORTS_CATEGORICAL` lists the sampler by."""
        return ""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # missing cells (NaN) are routed, not refused, by the samplers that support them
        tags.input_tags.allow_nan = getattr(self, "missing", "error") == "mia" and \
            self._sampler_name() in SUPPORTS_CATEGORICAL
        return tags

    def _record_features(self, n_features: int, names) -> None:
        self.n_features_in_ = n_features
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_

    def _check_predict_X(self, X):
        """``X`` checked against the fit's feature count and names (its values are validated and
        encoded once, by the posterior, with the levels of the fit); a DataFrame given to a model
        fitted on an array is renamed to the posterior's names."""
        check_is_fitted(self, "posterior_")
        name = type(self).__name__
        shape = getattr(X, "shape", None)
        if shape is None and X is not None:
            try:
                shape = np.asarray(X, dtype=object).shape
            except ValueError:  # ragged: the posterior's validation names it
                shape = None
        if shape is not None and len(shape) == 2 and shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {shape[1]} features, but {name} is expecting {self.n_features_in_} features as input."
            )
        if isinstance(X, pd.DataFrame):
            names = [str(c) for c in X.columns]
            fitted = getattr(self, "feature_names_in_", None)
            if fitted is None and getattr(self.posterior_, "feature_names", None):
                return X.set_axis(list(self.posterior_.feature_names), axis=1)
            if fitted is None:
                return X
            if names != list(fitted):
                raise ValueError(f"{name}: the feature names of X {names} differ from those seen in fit {list(fitted)}.")
        return X
