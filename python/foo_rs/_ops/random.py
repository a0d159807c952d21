"""normal_ and uniform_ from foo's Philox generators."""

from __future__ import annotations

import torch

from ._registry import _C, desc, impl


def _draw(fill, self, a, b, generator):
    if generator is None:
        fill(desc(self), a, b, self.device.index or 0, None)
        return self
    if generator.device.type != "foo":
        raise RuntimeError(
            f"Expected a 'foo' device type for generator but found '{generator.device.type}'"
        )
    offset = generator.get_offset()
    used = fill(desc(self), a, b, None, (generator.initial_seed(), offset))
    generator.set_offset(offset + used)
    return self


@impl("normal_")
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    if std < 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _draw(_C.normal_, self, float(mean), float(std), generator)


@impl("uniform_")
def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    if from_ > to:
        raise RuntimeError(
            f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}"
        )
    return _draw(_C.uniform_, self, float(from_), float(to), generator)
