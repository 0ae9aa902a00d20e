"""This skill's name for the suite's ownership marks and check: they live in
skills.shared.ownership (the model servers and the job targets use them too)."""

from skills.shared.ownership import *  # noqa: F403
from skills.shared.ownership import __all__  # noqa: F401
