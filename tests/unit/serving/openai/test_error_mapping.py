import pytest
from pydantic import BaseModel, ValidationError

from serving import errors
from serving.openai.error_mapping import map_error


def shape_ok(body):
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize("exc,status,code", [
    (errors.InvalidRequestError("bad", param="n"), 400, None),
    (errors.ContextLengthExceededError("long", param="messages"), 400, "context_length_exceeded"),
    (errors.AuthenticationError("no key"), 401, "invalid_api_key"),
    (errors.ModelNotFoundError("nope", param="model"), 404, "model_not_found"),
    (errors.RequestTooLargeError("big"), 413, "request_too_large"),
    (errors.OverloadedError("full", retry_after_s=2), 429, "overloaded"),
    (errors.RateLimitedError("slow down", retry_after_s=2, reason="rpm"), 429, "rate_limit_exceeded"),
    (errors.NoReplicaError("none"), 503, "no_replica"),
    (errors.DeadlineExceededError("late"), 504, "deadline_exceeded"),
    (errors.EngineError("boom"), 500, "engine_error"),
])
def test_request_errors_map_to_status_and_openai_shape(exc, status, code):
    response = map_error(exc)
    assert response.status == status
    err = shape_ok(response.body)
    assert err["code"] == code and err["message"] == exc.message


def test_overload_carries_retry_after():
    assert map_error(errors.OverloadedError("full", retry_after_s=3)).headers == {"Retry-After": "3"}
    assert map_error(errors.RateLimitedError("rpm", retry_after_s=7)).headers == {"Retry-After": "7"}


def test_a_missing_or_wrong_key_is_openais_401():
    response = map_error(errors.AuthenticationError("Incorrect API key provided."))
    assert response.headers == {"WWW-Authenticate": "Bearer"}
    assert shape_ok(response.body) == {"message": "Incorrect API key provided.",
                                       "type": "invalid_request_error", "param": None,
                                       "code": "invalid_api_key"}


def test_validation_error_is_a_400_naming_the_field():
    class Body(BaseModel):
        n: int

    with pytest.raises(ValidationError) as caught:
        Body.model_validate({"n": "x"})
    response = map_error(caught.value)
    assert response.status == 400
    assert shape_ok(response.body)["param"] == "n"


def test_unexpected_exceptions_are_500_without_details():
    response = map_error(RuntimeError("secret internals"))
    assert response.status == 500
    assert "secret" not in shape_ok(response.body)["message"]
