"""Pitfalls in pytest: a test that fails with a known PyTorch error gets the pitfall's title,
fix and link in its report (a "Pitfalls" section under its traceback) and in the terminal
summary.

Off unless asked for: `pytest -p pitfalls`, `--pitfalls`, `--pitfalls-server URL`, or
`pitfalls = true` in the ini file. Once installed, pytest loads the plugin through its `pytest11`
entry point in every run, where it only adds those options. Answers come from the server named
(or PITFALLS_SERVER), else from this machine's database as the notebook hook reads it
(PITFALLS_DATA_DIR). It never changes an outcome: a failure stays a failure, a pass a pass, and
an error while matching is one line in the report instead of an answer.
"""

import traceback
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from app.hook import Explainer

SECTION = "Pitfalls"
_OWN_NAMES = ("pitfalls", __name__)  # what `-p` may name this plugin by


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pitfalls", "known PyTorch pitfalls of failing tests")
    group.addoption(
        "--pitfalls",
        action="store_true",
        default=False,
        help="Explain tests that fail with a known PyTorch error (also: -p pitfalls).",
    )
    group.addoption(
        "--pitfalls-server",
        metavar="URL",
        default=None,
        help="Ask this Pitfalls server instead of the local database (turns the plugin on).",
    )
    parser.addini(
        "pitfalls", type="bool", default=False, help="Explain tests that fail with a known error."
    )


def _enabled(config: pytest.Config) -> bool:
    named = [name for name in config.getoption("plugins", None) or [] if name in _OWN_NAMES]
    return bool(
        named
        or config.getoption("pitfalls")
        or config.getoption("pitfalls_server")
        or config.getini("pitfalls")
    )


def pytest_configure(config: pytest.Config) -> None:
    if _enabled(config):
        reporter = PitfallsReport(config.getoption("pitfalls_server"))
        config.pluginmanager.register(reporter, "pitfalls-report")


def _as_section(answer: dict, link: str) -> str:
    """The top match in full (its fix with the code), then the other candidates by name."""
    match = answer["matches"][0]
    tier = "" if match["tier"] == "signature" else f", likely {match['confidence']:.0%}"
    lines = [f"{match['title']}  [{match['id']}{tier}]", f"  {match['summary']}"]
    lines += [f"  {name.replace('_', ' ')}: {value}" for name, value in match["captures"].items()]
    if match.get("fix_markdown"):
        lines.append("  Fix:")
        lines += [f"    {line}".rstrip() for line in match["fix_markdown"].strip().splitlines()]
    lines.append(f"  more: {link}")
    lines += [f"  or: {other['title']}  [{other['id']}]" for other in answer["matches"][1:3]]
    return "\n".join(lines)


class PitfallsReport:
    """Adds the answer to each failing test's report, and lists them at the end."""

    def __init__(self, server: str | None) -> None:
        self.server = server
        self._explainer: Explainer | None = None  # made at the first failure: a pass costs none
        self.explained: dict[str, tuple[str, list[str]]] = {}  # first line -> (text, nodeids)
        self.not_explained: list[str] = []

    def _explain(self, text: str) -> str | None:
        from app.cli.run import entry_link
        from app.hook import Explainer

        if self._explainer is None:
            self._explainer = Explainer(self.server)
        answer = self._explainer.explain(text)
        if not answer.get("matches"):
            return None
        return _as_section(answer, entry_link(answer["matches"][0], self._explainer.server))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        excinfo = call.excinfo
        outcomes = (pytest.fail.Exception, pytest.skip.Exception, pytest.exit.Exception)
        if report.failed and excinfo is not None and not excinfo.errisinstance(outcomes):
            try:
                text = "".join(traceback.format_exception(excinfo.type, excinfo.value, excinfo.tb))
                section = self._explain(text)
            except Exception as exc:  # matching must never change what the test reports
                section = f"pitfalls: could not explain this error ({type(exc).__name__}: {exc})"
            if section:
                report.sections.append((SECTION, section))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collected from the reports (also those pytest-xdist's workers send back)."""
        for name, text in report.sections:
            if name != SECTION:
                continue
            if text.startswith("pitfalls: could not explain"):
                self.not_explained.append(text)
                continue
            first = text.split("\n", 1)[0]
            self.explained.setdefault(first, (text, []))[1].append(report.nodeid)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.explained and not self.not_explained:
            return
        terminalreporter.section("pitfalls: known PyTorch errors")
        for text, nodeids in self.explained.values():
            first, _, rest = text.partition("\n")
            terminalreporter.write_line(first, bold=True)
            for nodeid in nodeids:
                terminalreporter.write_line(f"  failed: {nodeid}")
            terminalreporter.write_line(rest)
        if self.not_explained:
            count = len(self.not_explained)
            terminalreporter.write_line(
                f"{count} failure(s) could not be explained; the first: {self.not_explained[0]}"
            )
