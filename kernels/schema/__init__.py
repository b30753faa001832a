"""The data model of the simulator in one place: integer enums (``enums``), every table's
dtype (``tables``) and the ``State`` record that bundles a run's tables (``state``).

Kernels import from here and nowhere else for names of states, kinds, statuses and
column layouts; ``blis_fast.run.tables`` allocates the tables.
"""

from .enums import *  # noqa: F401,F403
from .tables import *  # noqa: F401,F403
from .state import State  # noqa: F401
