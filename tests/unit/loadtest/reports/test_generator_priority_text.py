"""The console table and report.md say when the generator ran at real-time priority."""

from rich.console import Console

from loadtest.reports.markdown import stage_section
from loadtest.reports.table import facts
from tests.unit.loadtest.reports.every_section import every_section


def texts(realtime):
    stage = every_section()[0].stages[0]
    stage = stage.model_copy(update={"generator": stage.generator.model_copy(update={"realtime": realtime})})
    console = Console(width=200, record=True)
    console.print(facts(stage))
    generator_line = next(line for line in console.export_text().splitlines() if line.startswith("generator"))
    markdown_line = next(line for line in stage_section(stage) if line.startswith("Load generator:"))
    return generator_line, markdown_line


def test_real_time_priority_is_mentioned_when_obtained():
    table, markdown = texts(True)
    assert table.rstrip().endswith(", real-time priority")
    assert markdown.endswith(", at real-time priority.")


def test_nothing_is_said_otherwise():
    for realtime in (False, None):
        assert not any("real-time" in line for line in texts(realtime))
