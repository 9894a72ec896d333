"""The compiled parts: the windowed DP's layers (``bellows.optimizer._windowed``) and the
weighing of candidate batches for TSF rows (``bellows.scaling._batches``).

Everything else is in pyproject.toml. Both extensions are optional: where no C compiler is
at hand the install goes on without them, and the same computations run in NumPy (the same
allocations, objectives and tables, bit for bit; slower). See docs/optimizer.md, "The
compiled layers", and docs/simulator.md.
"""

from setuptools import Extension, setup

# No fused multiply-add where a target has one: each product and sum rounds on its own, as
# in NumPy and in the scalar rules the results are held equal to.
_EXACT = ["-ffp-contract=off"]

setup(
    ext_modules=[
        Extension(
            "bellows.optimizer._windowed",
            sources=["plugin/bellows/optimizer/_windowed.c"],
            extra_compile_args=_EXACT,
            optional=True,
        ),
        Extension(
            "bellows.scaling._batches",
            sources=["plugin/bellows/scaling/_batches.c"],
            extra_compile_args=_EXACT,
            optional=True,
        ),
    ]
)
