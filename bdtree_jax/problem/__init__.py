"""The model layer's problems: one typed object built once per fit from (X, y) and the prior/likelihood options."""

from .bart import BARTProblem, build_bart_probit_problem, build_bart_problem  # noqa: F401
from .tree import TASKS, TreeProblem, build_problem  # noqa: F401
