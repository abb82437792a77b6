"""Core slots: real ``flock`` locks in a temporary directory (no Serve, no engine)."""

import subprocess
import sys
import time

from serving.engine.core_slots import claim_core_slot


def test_each_live_claim_holds_its_own_slot_and_a_released_one_is_taken_first(tmp_path):
    first, second = claim_core_slot(tmp_path), claim_core_slot(tmp_path)
    assert (first.index, second.index) == (0, 1)
    first.release()
    third = claim_core_slot(tmp_path)
    assert third.index == 0  # the lowest free slot, not the next number
    fourth = claim_core_slot(tmp_path)
    assert fourth.index == 2
    for slot in (second, third, fourth):
        slot.release()


def test_a_killed_process_frees_its_slot_for_the_next_replica(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from serving.engine.core_slots import claim_core_slot; "
         f"claim_core_slot(__import__('pathlib').Path({str(tmp_path)!r})); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        mine = claim_core_slot(tmp_path)
        assert mine.index == 1  # slot 0 is the other process's
        holder.kill()
        holder.wait(timeout=10)
        deadline = time.monotonic() + 5
        while (slot := claim_core_slot(tmp_path)).index != 0 and time.monotonic() < deadline:
            slot.release()
            time.sleep(0.05)
        assert slot.index == 0
        slot.release()
        mine.release()
    finally:
        holder.kill()
