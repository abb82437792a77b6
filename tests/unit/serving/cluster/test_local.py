

def test_a_clean_stop_drops_serves_expected_shutdown_noise_and_nothing_else():
    import io

    from serving.cluster.local import _ShutdownFilter

    out = io.StringIO()
    quiet = _ShutdownFilter(out)
    quiet.write("\x1b[33m(raylet)\x1b[0m Task ServeController.graceful_shutdown failed. There are infinite "
                "retries remaining, so the task will be retried. Error: The actor is dead because it was "
                "killed by `ray.kill`.\n")
    quiet.write("(raylet) Task ServeController.listen_for_change failed. ... killed by `ray.kill`.\n")
    quiet.write("a real error\n")
    assert out.getvalue() == "a real error\n"
