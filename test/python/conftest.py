"""pytest set-up for the attnc package's CPU tests: import the package from the source tree's
python/ (unless an installed one is asked for) and keep the kernel cache in a temporary folder."""
import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if not os.environ.get("ATTNC_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(_ROOT, "python"))


@pytest.fixture(scope="session", autouse=True)
def _kernel_cache(tmp_path_factory):
    """A disk cache of the session's own, so tests compile what they say and leave nothing."""
    previous = os.environ.get("ATTNC_CACHE_DIR")
    os.environ["ATTNC_CACHE_DIR"] = str(tmp_path_factory.mktemp("attnc-cache"))
    yield
    if previous is None:
        os.environ.pop("ATTNC_CACHE_DIR", None)
    else:
        os.environ["ATTNC_CACHE_DIR"] = previous
