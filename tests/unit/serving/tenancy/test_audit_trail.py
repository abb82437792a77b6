"""The audit trail's hash chain on real files: written, rotated, verified; a tampered,
a truncated, a removed file each reported at the first broken record."""

from __future__ import annotations

import argparse
import json

from serving.tenancy.audit_chain import line_hash
from serving.tenancy.audit_files import AuditWriter, verify_path, writer_files
from serving.tenancy_cli import cmd_audit_verify


def records(n: int, start: int = 0) -> list[dict]:
    return [{"request_id": f"r{i}", "key": "clinic", "model": "m", "status": 200, "prompt_tokens": i}
            for i in range(start, start + n)]


def write(folder, n=10, *, max_file_bytes=1 << 20, writer="replica-a"):
    audit = AuditWriter(folder, writer, max_file_bytes=max_file_bytes)
    audit.write(records(n))
    audit.close()
    return audit


def test_each_record_carries_the_hash_of_the_line_before_it(tmp_path):
    audit = write(tmp_path, 3)
    lines = audit.path.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "serveout-audit/1" and header["prev"] is None and header["seq"] == 0
    for before, line in zip(lines, lines[1:]):
        assert json.loads(line)["prev"] == line_hash(before)
    verdicts, broken = verify_path(audit.path)
    assert broken is None and verdicts[0].records == 3


def test_rotation_continues_the_chain_across_files(tmp_path):
    write(tmp_path, 200, max_file_bytes=4096)
    files = writer_files(tmp_path)["replica-a"]
    assert len(files) > 3
    verdicts, broken = verify_path(tmp_path)
    assert broken is None
    assert sum(v.records for v in verdicts) == 200
    second = json.loads(files[1][1].read_text().splitlines()[0])
    assert second["prev"] == verdicts[0].last_hash  # the header of file 1 names file 0's last line


def test_a_writer_started_again_continues_after_its_newest_file(tmp_path):
    write(tmp_path, 2)
    write(tmp_path, 2)
    verdicts, broken = verify_path(tmp_path)
    assert broken is None and [v.records for v in verdicts] == [2, 2]


def test_an_altered_record_breaks_the_chain_at_the_next_line(tmp_path, capsys):
    audit = write(tmp_path, 5)
    lines = audit.path.read_text().splitlines()
    lines[3] = lines[3].replace('"status":200', '"status":404')  # record 3 (line 4) altered
    audit.path.write_text("\n".join(lines) + "\n")
    _, broken = verify_path(audit.path)
    assert broken.line == 5 and not broken.truncated
    assert "line 4 was altered" in broken.reason
    assert cmd_audit_verify(argparse.Namespace(path=str(tmp_path))) == 1
    assert "broken" in capsys.readouterr().out


def test_a_removed_record_is_found(tmp_path):
    audit = write(tmp_path, 5)
    lines = audit.path.read_text().splitlines()
    del lines[2]
    audit.path.write_text("\n".join(lines) + "\n")
    assert verify_path(audit.path)[1].line == 3


def test_a_record_cut_short_is_reported_as_truncated(tmp_path, capsys):
    audit = write(tmp_path, 5)
    data = audit.path.read_bytes()
    audit.path.write_bytes(data[:-25])  # a crash in the middle of the last line
    _, broken = verify_path(audit.path)
    assert broken.truncated and broken.line == 6
    assert cmd_audit_verify(argparse.Namespace(path=str(audit.path))) == 1
    assert "cut short" in capsys.readouterr().out


def test_a_missing_or_altered_rotated_file_breaks_the_set(tmp_path):
    write(tmp_path, 200, max_file_bytes=4096)
    files = writer_files(tmp_path)["replica-a"]
    files[1][1].unlink()
    _, broken = verify_path(tmp_path)
    assert "missing" in broken.reason
    write(tmp_path / "b", 200, max_file_bytes=4096)
    files = writer_files(tmp_path / "b")["replica-a"]
    lines = files[0][1].read_text().splitlines()
    files[0][1].write_text("\n".join(lines[:-1]) + "\n")  # file 0 lost its last record
    _, broken = verify_path(tmp_path / "b")
    assert broken.file == str(files[1][1]) and broken.line == 1


def test_an_intact_folder_verifies_with_exit_0(tmp_path, capsys):
    write(tmp_path, 3, writer="a")
    write(tmp_path, 4, writer="b")
    assert cmd_audit_verify(argparse.Namespace(path=str(tmp_path))) == 0
    assert "7 records" in capsys.readouterr().out
