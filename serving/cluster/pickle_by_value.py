"""Make Ray's cloudpickle by-value registrations nest, in a driver process.

Ray 2.60 registers a module for pickling by value around each serialisation of a
request router or autoscaling policy (``ray/serve/config.py``:
``register_pickle_by_value``, ``dumps``, ``unregister_pickle_by_value``), from
``serve.run``'s thread and from Serve's handle thread in the same process (a handle
rebuilds the deployment config it is pushed). Interleaved, one thread unregisters a
module the other already removed, and ``serve.run`` fails with "... is not registered
for pickle by value" (seen in the test suite: a redeploy while the process held a
handle, three attempts in a row). Counting registrations per module under one lock
makes each pair nest: a module stays registered until its last user unregisters it.
"""

from __future__ import annotations

import threading
from collections import Counter
from types import ModuleType


def count_by_value_registrations() -> None:
    """Patch ``ray.cloudpickle`` (once per process) so that registrations are counted."""
    from ray import cloudpickle

    if getattr(cloudpickle.register_pickle_by_value, "counted", False):
        return
    register, unregister = cloudpickle.register_pickle_by_value, cloudpickle.unregister_pickle_by_value
    lock, users = threading.Lock(), Counter[str]()

    def counted_register(module: ModuleType) -> None:
        with lock:
            if users[module.__name__] == 0:
                register(module)
            users[module.__name__] += 1

    def counted_unregister(module: ModuleType) -> None:
        with lock:
            if users[module.__name__] <= 1:
                users.pop(module.__name__, None)
                unregister(module)  # a module never registered still raises, as before
            else:
                users[module.__name__] -= 1

    counted_register.counted = True  # type: ignore[attr-defined]
    cloudpickle.register_pickle_by_value = counted_register
    cloudpickle.unregister_pickle_by_value = counted_unregister
