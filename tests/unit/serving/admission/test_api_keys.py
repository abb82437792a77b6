"""The keys file format, and telling which key a request presents (pure)."""

import hashlib
import hmac

import pytest

from serving.config.gateway import KeyLimits
from serving.errors import AuthenticationError, ConfigError
from serving.admission import api_keys
from serving.admission.api_keys import KeyRing, bearer_token, parse_keys

ALICE = "sk-alice-0123456789abcdef"
BOB = "sk-bob-0123456789abcdef"
DEFAULTS = KeyLimits(rpm=60, tpm=10_000)


def parse(text, defaults=DEFAULTS):
    return parse_keys(text, defaults=defaults, source="keys")


def test_the_three_line_forms_comments_and_limits():
    entries = parse(f"""
        # a comment line, then a blank one

        alice:{ALICE} rpm=5 concurrency=2   # inline comment
        bob {BOB} tpm=none
        sk-nameless-0123456789abcdef
    """)
    alice, bob, nameless = entries
    assert (alice.name, alice.key) == ("alice", ALICE)
    assert alice.limits == KeyLimits(rpm=5, tpm=10_000, concurrency=2)
    assert (bob.name, bob.key, bob.limits) == ("bob", BOB, KeyLimits(rpm=60))
    digest = hashlib.sha256(b"sk-nameless-0123456789abcdef").hexdigest()
    assert nameless.name == f"key-{digest[:8]}" and nameless.limits == DEFAULTS


def test_a_bare_key_followed_by_limits_is_not_read_as_a_name():
    (entry,) = parse(f"{ALICE} rpm=7")
    assert entry.key == ALICE and entry.name.startswith("key-") and entry.limits.rpm == 7


@pytest.mark.parametrize("text,match", [
    ("", "no keys"),
    ("# only a comment", "no keys"),
    ("alice:short", "at least 16"),
    (f"anonymous:{ALICE}", "key name"),
    (f"bad/name:{ALICE}", "key name"),
    (f"alice:{ALICE} rmp=5", "only limits"),
    (f"alice:{ALICE} rpm=0", "rpm must be"),
    (f"alice:{ALICE} rpm=lots", "rpm must be"),
    (f"alice:{ALICE}\nalice:{BOB}", "`alice` is used twice"),
    (f"alice:{ALICE}\nbob:{ALICE}", "appears twice"),
])
def test_bad_files_are_one_line_errors_that_never_show_a_key(text, match):
    with pytest.raises(ConfigError, match=match) as err:
        parse(text)
    assert ALICE not in str(err.value) and BOB not in str(err.value)
    assert "\n" not in str(err.value)


def test_errors_name_the_line():
    with pytest.raises(ConfigError, match="keys line 3"):
        parse(f"# header\nalice:{ALICE}\nbob:tiny")


def test_a_stray_third_field_is_refused_without_echoing_it():
    with pytest.raises(ConfigError) as err:
        parse(f"alice {ALICE} {BOB}")
    assert BOB not in str(err.value)


@pytest.mark.parametrize("header,token", [
    (f"Bearer {ALICE}", ALICE), (f"bearer   {ALICE} ", ALICE), (None, None), ("", None),
    ("Bearer", None), ("Bearer ", None), (f"Basic {ALICE}", None), (ALICE, None),
])
def test_bearer_token(header, token):
    assert bearer_token(header) == token


def ring():
    return KeyRing(parse(f"alice:{ALICE} rpm=5\nbob:{BOB}"))


def test_the_right_key_names_its_caller_and_limits():
    caller = ring().identify(ALICE)
    assert caller.name == "alice" and caller.limits.rpm == 5
    assert ring().identify(BOB).name == "bob"
    assert ring().names == ("alice", "bob")


@pytest.mark.parametrize("token", [None, "sk-wrong-0123456789abcdef", ALICE[:-1], ALICE + "x", "é" * 20])
def test_missing_or_wrong_keys_are_refused(token):
    with pytest.raises(AuthenticationError):
        ring().identify(token)


def test_only_digests_are_kept():
    keys = ring()
    assert ALICE not in repr(vars(keys)) and ALICE.encode() not in repr(vars(keys)).encode()


@pytest.mark.parametrize("token", [ALICE, BOB, "sk-wrong-0123456789abcdef"])
def test_every_key_is_compared_whichever_matches(monkeypatch, token):
    # An early exit would make a match on the first key answer faster than on the last.
    calls, original = [], hmac.compare_digest

    def counting(a, b):
        calls.append(1)
        return original(a, b)

    keys = ring()
    monkeypatch.setattr(api_keys.hmac, "compare_digest", counting)
    try:
        keys.identify(token)
    except AuthenticationError:
        pass
    assert len(calls) == 2
