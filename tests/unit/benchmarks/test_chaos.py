"""The chaos benchmark's tally of what clients saw (pure)."""

from benchmarks.chaos import CUT, HUNG, FaultReport, StreamEnd, table


def test_each_outcome_lands_in_one_column_and_every_request_is_counted():
    report = FaultReport("replica")
    for status in (200, 200, 429, 404, 502, 503, HUNG, CUT):
        report.count(status)
    assert (report.sent, report.ok, report.refused, report.other_4xx, report.server_errors, report.hung,
            report.cut_whole) == (8, 2, 1, 1, 2, 1, 1)
    assert sum(report.statuses.values()) == report.sent


def test_the_table_says_when_the_stack_did_not_recover():
    recovered, stuck = FaultReport("router", recover_s=12.5), FaultReport("hung-replica")
    rendered = table([recovered, stuck])
    cells = [list(column.cells) for column in rendered.columns]
    assert cells[-1] == ["12.5", "not within the timeout"]


def test_the_first_body_of_each_failing_status_is_kept_to_say_who_answered():
    report = FaultReport("head")
    report.count(200, "{}")
    report.count(503, '{"error": {"code": "router_unavailable"}}')
    report.count(503, "text from elsewhere")
    assert report.bodies == {"503": '{"error": {"code": "router_unavailable"}}'}


def test_a_completed_stream_of_the_killed_replica_counts_as_resumed_and_exact_only_if_it_is_the_greedy_answer():
    report = FaultReport("replica")
    for end in (StreamEnd(200, "completed", "r1", "1, 2, 3"), StreamEnd(200, "completed", "r1", "1, 2, 2, 3"),
                StreamEnd(200, "completed", "r2", "1, 2, 3"), StreamEnd(200, "cut", "r1", "1, 2"),
                StreamEnd(200, "error_event", "r1", "1")):
        report.count_stream(end, killed="r1", reference="1, 2, 3")
    assert (report.streams_completed, report.streams_exact, report.streams_resumed,
            report.streams_resumed_exact, report.streams_cut, report.streams_error_event) == (3, 2, 2, 1, 1, 1)
    untouched = FaultReport("router")
    untouched.count_stream(StreamEnd(200, "completed", "r1", "x"), killed=None, reference="x")
    assert untouched.streams_resumed == 0 and untouched.streams_exact == 1
