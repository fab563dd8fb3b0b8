"""What every estimator here records about its training inputs and checks again at prediction."""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..data import check_X


class _FeatureChecks:
    """What every fitted estimator here records about its training inputs (``n_features_in_``,
    ``feature_names_in_``) and checks again at prediction (scikit-learn's conventions)."""

    def _record_features(self, n_features: int, names) -> None:
        self.n_features_in_ = n_features
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_

    def _check_predict_X(self, X):
        check_is_fitted(self, "posterior_")
        name = type(self).__name__
        Xv, names = check_X(X, estimator=name)
        if Xv.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {Xv.shape[1]} features, but {name} is expecting {self.n_features_in_} features as input."
            )
        fitted = getattr(self, "feature_names_in_", None)
        if names is not None and fitted is not None and list(names) != list(fitted):
            raise ValueError(f"{name}: the feature names of X {names} differ from those seen in fit {list(fitted)}.")
        return Xv
