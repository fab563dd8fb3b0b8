"""scikit-learn estimators (the face layer): single Bayesian trees and BART.

They follow scikit-learn's conventions: ``__init__`` only stores keyword parameters
(``get_params`` / ``set_params`` / ``clone`` work, so they fit in ``Pipeline`` and
``GridSearchCV``); ``fit`` validates the input, runs the sampler and sets ``posterior_``,
``n_features_in_`` and, for DataFrames, ``feature_names_in_``; predictions average over the
posterior draws.
"""

from .bart import BARTClassifier, BARTRegressor
from .bart_poisson import BARTPoissonRegressor
from .bart_survival import BARTSurvival
from .tree import BayesianTreeClassifier, BayesianTreeRegressor

__all__ = ["BARTClassifier", "BARTPoissonRegressor", "BARTRegressor", "BARTSurvival", "BayesianTreeClassifier", "BayesianTreeRegressor"]
