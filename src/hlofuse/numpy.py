"""NumPy-like functions on traced arrays: `import hlofuse.numpy as hnp`."""

from hlofuse.frontend.numpy import *  # noqa: F403
from hlofuse.frontend.numpy import __all__, __getattr__  # noqa: F401
