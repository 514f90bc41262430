"""Package discovery only; everything else is in pyproject.toml.

pyproject's ``packages.find`` cannot add a package that lives outside the source tree's
layout, and the bundled fixtures (top-level ``fixtures/``, read by the tests in place) ship
as the data package ``race.fixtures`` so that an installed ``race demo`` finds them."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["race*", "rsc*", "planner*", "backends*"]), "race.fixtures"],
    package_dir={"race.fixtures": "fixtures"},
)
