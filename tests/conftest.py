"""Test-wide setup: pick the hypothesis profile (`ci` when CI=true, else `dev`)."""

from stitch.engine.testing import load_profile

load_profile()
