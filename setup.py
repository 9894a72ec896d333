"""The one compiled part: the windowed DP's layers (``bellows.optimizer._windowed``).

Everything else is in pyproject.toml. The extension is optional: where no C compiler is at
hand the install goes on without it, and ``bellows.optimizer.windowed`` runs the same DP in
NumPy layers (the same allocations and objectives, bit for bit; slower on narrow windows).
See docs/optimizer.md, "The compiled layers".
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "bellows.optimizer._windowed",
            sources=["plugin/bellows/optimizer/_windowed.c"],
            optional=True,
        )
    ]
)
