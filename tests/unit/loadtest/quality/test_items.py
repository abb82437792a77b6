"""The item schema, the items file and the bundled evaluation set."""

import json
from collections import Counter

import pytest

from loadtest.errors import ConfigError
from loadtest.quality.grading import grade
from loadtest.quality.items import load_items, parse_items, select

ITEM = {"id": "capital-france", "category": "facts", "source": "written for the test",
        "prompt": "What is the capital of France?", "answers": ["Paris"]}


def line(**changes) -> str:
    return json.dumps({**ITEM, **changes})


def test_an_item_and_its_grading_rule():
    (item,) = parse_items([line(system="Be brief.", shots=[["Capital of Italy?", "Rome"]])])
    assert item.grading == "exact" and item.shots == (("Capital of Italy?", "Rome"),)
    number = parse_items([line(answers=None, number=12)])[0]
    fields = parse_items([line(answers=None, fields={"name": "Anna", "age": 34})])[0]
    assert (number.grading, fields.grading) == ("number", "json")


@pytest.mark.parametrize(("changes", "message"), [
    ({"answers": None}, 'exactly one of "answers", "number" or "fields"'),
    ({"number": 3}, "(got answers, number)"),
    ({"answers": [" "]}, "at least one non-empty answer"),
    ({"answers": None, "fields": {}}, "at least one field"),
    ({"source": ""}, "source"),
    ({"colour": "red"}, "colour: Extra inputs are not permitted"),
    ({"shots": [["only a question"]]}, "shots"),
])
def test_a_bad_item_names_its_line_and_problem(changes, message):
    with pytest.raises(ConfigError, match="items, line 2") as caught:
        parse_items(["", line(**changes)])
    assert message in str(caught.value)


def test_bad_files():
    with pytest.raises(ConfigError, match="line 1: not JSON"):
        parse_items(["{nope"])
    with pytest.raises(ConfigError, match="line 2: id 'capital-france' already used on line 1"):
        parse_items([line(), line()])
    with pytest.raises(ConfigError, match="no items"):
        parse_items(["", "  "])


def test_load_items_from_a_file_or_a_clear_error(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text(line() + "\n", encoding="utf-8")
    assert load_items(path)[0].id == "capital-france"
    with pytest.raises(ConfigError, match="does not exist"):
        load_items(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError, match="cannot read"):
        load_items(tmp_path)  # a folder


def test_select_takes_items_in_turn_from_each_category():
    items = parse_items([line(id=f"{c}{i}", category=c) for c in "abc" for i in range(3)])
    assert [i.id for i in select(items, limit=4)] == ["a0", "b0", "c0", "a1"]
    assert [i.id for i in select(items, categories=["b"])] == ["b0", "b1", "b2"]
    assert len(select(items, limit=100)) == 9
    with pytest.raises(ConfigError, match="unknown category z; valid: a, b, c"):
        select(items, categories=["z"])
    with pytest.raises(ConfigError, match="--limit must be >= 1"):
        select(items, limit=0)


def test_the_bundled_set_is_valid_and_sourced():
    items = load_items()
    assert 200 <= len(items) <= 400
    categories = Counter(item.category for item in items)
    assert set(categories) == {"facts", "facts-plain", "arithmetic", "extraction", "vi-admin"}
    assert min(categories.values()) >= 20
    assert all(item.source.strip() for item in items)


def test_the_bundled_reference_answers_grade_right():
    """Each item's own answer (its first listed answer, its number, its fields as JSON)
    passes its grading rule: no item is impossible to get right."""
    for item in load_items():
        if item.answers is not None:
            reply = item.answers[0]
        elif item.number is not None:
            reply = f"The answer is {item.number}."
        else:
            reply = json.dumps(item.fields, ensure_ascii=False)
        assert grade(item, reply).correct, item.id
