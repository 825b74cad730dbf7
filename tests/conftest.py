import sys
from pathlib import Path

import pytest

# tests/_brute.py is a helper module of the tests, imported as `_brute`.
sys.path.insert(0, str(Path(__file__).parent))

_deselected_slow = []


def pytest_deselected(items):
    _deselected_slow.extend(item for item in items if item.get_closest_marker("slow"))


def pytest_terminal_summary(terminalreporter, config):
    # The default run leaves the slow tests out (pyproject's addopts): say so at the end,
    # where a reader of `python -m pytest -q` looks, and how to run them.
    if _deselected_slow and config.option.markexpr == "not slow":
        terminalreporter.write_line(f"{len(_deselected_slow)} slow tests deselected (the default); "
                                    f"run them with `python -m pytest -q -m slow`")


@pytest.fixture(scope="session")
def model_ci():
    """(SuiteResult, printed text) of the model over the ci level on every build: the
    same run serves every test that looks at it (it takes several seconds)."""
    import io

    from decode_topk.conformance.suite import run_suite
    from decode_topk.kernel.policy import BUILDS

    stream = io.StringIO()
    result = run_suite("model", "ci", stream=stream, builds=list(BUILDS))
    return result, stream.getvalue()


@pytest.fixture
def scratch():
    """Names a test registers with the conformance registry, unregistered after it (with
    every `pkg.module:attr` name the test made the registry load)."""
    from decode_topk.conformance import registry

    names = []
    yield names
    for name in names + [n for n in registry.names() if ":" in n]:
        registry.unregister(name)
