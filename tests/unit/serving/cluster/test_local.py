

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


def test_dead_nodes_are_started_again_the_head_by_its_own_restart():
    from types import SimpleNamespace

    from serving.cluster.local import LocalCluster

    class FakeNodes:  # a fake LocalNodes: node 0 (head) and node 2 ended, node 1 runs
        def __init__(self):
            self.nodes = [SimpleNamespace(index=i, ip=f"127.0.0.{i + 2}", head=i == 0,
                                          process=SimpleNamespace(poll=lambda ended=ended: 0 if ended else None))
                          for i, ended in enumerate((True, False, True))]
            self.restarted: list[int] = []

        def restart(self, index):
            self.restarted.append(index)

    cluster = LocalCluster()
    assert cluster.replace_dead_nodes() == []  # one node: nothing to watch
    cluster.nodes = FakeNodes()
    heads: list[str] = []
    cluster.restart_head = lambda: heads.append("head")
    assert cluster.replace_dead_nodes() == ["127.0.0.2", "127.0.0.4"]
    assert heads == ["head"] and cluster.nodes.restarted == [2]
