"""The Hypothesis strategy of the pooling kernels' property tests: random windows over 2-D and 3-D images."""

from __future__ import annotations

from typing import Any

from hypothesis import assume
from hypothesis import strategies as st


@st.composite
def pool_windows(draw: st.DrawFn, largest: int, adaptive: bool = False) -> tuple[list[int], dict[str, Any]]:
    """(spatial sizes, attributes): 2-D twice as often as 3-D, sides up to ``largest`` (3-D: 4), windows up to half
    of it, paddings up to the window (windows all in the padding), ``ceil_mode``; ``global_pooling`` one time in
    six, ``adaptive`` (where asked) one in six of the rest; else at least one window per axis."""
    dims = draw(st.sampled_from((2, 2, 3)))
    sizes = [draw(st.integers(1, largest if dims == 2 else 4)) for _ in range(dims)]
    ksize = [draw(st.integers(1, largest // 2)) for _ in range(dims)]
    strides = [draw(st.integers(1, 3)) for _ in range(dims)]
    paddings = [draw(st.integers(0, k)) for k in ksize]
    ceil = draw(st.booleans())
    attrs = {"ksize": ksize, "strides": strides, "paddings": paddings, "ceil_mode": ceil}
    attrs["global_pooling"] = draw(st.integers(0, 5)) == 0
    attrs["adaptive"] = adaptive and not attrs["global_pooling"] and draw(st.integers(0, 5)) == 0
    if not attrs["global_pooling"] and not attrs["adaptive"]:
        assume(all(s - k + 2 * p + (t - 1 if ceil else 0) > -t for s, k, p, t in zip(sizes, ksize, paddings, strides)))
    return sizes, attrs
