"""Normalisation and the three grading rules."""

import pytest

from loadtest.quality.grading import first_json_object, grade, last_number, normalise, same_value
from loadtest.quality.items import QualityItem


def item(**grading) -> QualityItem:
    return QualityItem(id="x", category="c", source="test", prompt="?", **grading)


@pytest.mark.parametrize(("text", "expected"), [
    ("Paris", "paris"),
    ("  **The Paris.** ", "paris"),
    ('The opposite of "wet" is "dry".', "opposite of wet is dry"),
    ("Washington, D.C.", "washington dc"),
    ("An  apple\n", "apple"),
    ("Hồ Chí Minh", "hồ chí minh"),
    ("Ho\u0302\u0300 Chi\u0301 Minh", "hồ chí minh"),  # decomposed accents: NFC first
    ("`Au`", "au"),
])
def test_normalise(text, expected):
    assert normalise(text) == expected


def test_exact_match_accepts_any_listed_answer_normalised():
    capital = item(answers=("Paris", "The capital of France is Paris"))
    assert grade(capital, "Paris.").correct
    assert grade(capital, "The capital of France is Paris.").correct
    wrong = grade(capital, "The capital of France is Lyon.")
    assert not wrong.correct and wrong.got == "capital of france is lyon"
    assert not grade(capital, "Paris is the capital, I think").correct  # exact, not contains


@pytest.mark.parametrize(("text", "number"), [
    ("4 + 2 = 6.", 6.0), ("The answer is 1,024", 1024.0), ("-3", -3.0), ("about 2.5 km", 2.5), ("none", None),
])
def test_last_number(text, number):
    assert last_number(text) == number


def test_number_grading_reads_the_last_number():
    sum_item = item(number=12)
    assert grade(sum_item, "7 + 5 = 12").correct
    assert not grade(sum_item, "12 + 9 = 11").correct
    assert grade(sum_item, "no idea").got == "no number"


def test_first_json_object_skips_fences_and_prose():
    assert first_json_object('```json\n{"a": 1}\n```') == {"a": 1}
    assert first_json_object('Here: {broken} then {"b": [1, 2]} and {"c": 3}') == {"b": [1, 2]}
    assert first_json_object("[1, 2]") is None
    assert first_json_object("no object") is None


def test_json_field_match():
    person = item(fields={"name": "Anna", "age": 34})
    assert grade(person, '{"name": "Anna", "age": 34, "extra": true}').correct  # extra fields are fine
    assert grade(person, '{"name": "anna", "age": "34"}').correct  # text normalised, numbers by value
    missing = grade(person, '{"name": "Anna"}')
    assert not missing.correct and missing.got == "age=null"
    assert grade(person, "Anna, 34").got == "no JSON object"
    assert not grade(person, '{"name": "Anna", "age": 35}').correct


@pytest.mark.parametrize(("expected", "got", "same"), [
    (1980, 1980, True), (1980, 1980.0, True), (1980, "1980", True), (1980, "1,980", True), (1980, "about 1980", False),
    ("Hà Nội", "Hà Nội.", True), ("Hà Nội", "Ha Noi", False), ("lamp", "The lamp", True),
    ("12", 12, True), (True, True, True), (True, "true", False), (None, None, True), ("x", {"x": 1}, False),
])
def test_same_value(expected, got, same):
    assert same_value(expected, got) is same
