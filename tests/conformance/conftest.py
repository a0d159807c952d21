"""Collects the conformance figures and prints them in pytest's terminal summary."""

import pytest

_REPORT = pytest.StashKey[list]()


def pytest_configure(config):
    config.stash[_REPORT] = []


@pytest.fixture
def conformance_report(request):
    """A list of lines shown in the 'foo native conformance' summary section."""
    return request.config.stash[_REPORT]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = config.stash.get(_REPORT, [])
    if lines:
        terminalreporter.section("foo native conformance")
        for line in lines:
            terminalreporter.write_line(line)
