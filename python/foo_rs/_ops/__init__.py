"""Registers every foo kernel (each a thin call into Rust) for PrivateUse1."""

from . import conv as _conv  # noqa: F401
from . import index as _index  # noqa: F401
from . import attention as _attention  # noqa: F401
from . import copy as _copy  # noqa: F401
from . import linalg as _linalg  # noqa: F401
from . import decomp as _decomp  # noqa: F401
from . import nn as _nn  # noqa: F401
from . import norm_pool as _norm_pool  # noqa: F401
from . import nn_more as _nn_more  # noqa: F401
from . import optim as _optim  # noqa: F401
from . import random as _random  # noqa: F401
from . import reduce as _reduce  # noqa: F401
from . import rnn as _rnn  # noqa: F401
from . import rnn_seq as _rnn_seq  # noqa: F401
from . import sort as _sort  # noqa: F401
from . import search as _search  # noqa: F401
from ._registry import python_kernel_calls, registered_ops

from . import elementwise as _elementwise  # noqa: F401
from . import fft as _fft  # noqa: F401
from . import complex_ops as _complex_ops  # noqa: F401
from . import special as _special  # noqa: F401
from ._registry import register_foreach

register_foreach()  # last: a foreach kernel calls the per-tensor ops registered above

__all__ = ["python_kernel_calls", "registered_ops"]
