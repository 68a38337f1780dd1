"""Numbers on the command line that used to be taken as given (issue #45 item 8): refused with exit status 2
and one line on stderr; and a file truncated while `goodput upload` sends it is named, not blamed on the
network."""

from __future__ import annotations

import pytest

from goodput_cli.main import main
from goodput_cli.upload import Client, MultipartBody, UploadError
from tests.conftest import corpus_file

FILE = str(corpus_file("vecadd-2026.sqlite"))


@pytest.mark.parametrize("argv", [
    ["analyze", FILE, "--top", "-1"],
    ["analyze", FILE, "--progress-after", "nan"],
    ["analyze", FILE, "--progress-after", "-3"],
    ["ingest", FILE, "--out", "/nonexistent-dir/x.duckdb", "--progress-after", "inf"],
    ["upload", FILE, "--server", "http://127.0.0.1:9", "--token", "x", "--job", "j", "--retries", "-1"],
    ["upload", FILE, "--server", "http://127.0.0.1:9", "--token", "x", "--job", "j", "--wait", "--timeout", "nan"],
], ids=["top-negative", "progress-nan", "progress-negative", "progress-inf", "retries-negative", "timeout-nan"])
def test_bad_numbers_are_refused_in_one_line(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("goodput: --") and argv[-2] in err, err


def test_top_zero_is_still_accepted(capsys):
    assert main(["analyze", FILE, "--top", "0", "--format", "json", "--quiet"]) == 0


class _Truncating:
    """Upload progress that truncates the file being sent after its first chunk (another process rewriting it)."""

    def __init__(self, path) -> None:
        self.path = path

    def start_file(self, name, size) -> None:
        pass

    def sent(self, n) -> None:
        with open(self.path, "r+b") as fh:
            fh.truncate(n)

    def end_file(self) -> None:
        pass


@pytest.mark.slow
@pytest.mark.services
def test_a_file_truncated_while_it_is_sent_is_named(make_service, tmp_path):
    svc = make_service()
    svc.start_web()
    path = tmp_path / "growing.sqlite"
    path.write_bytes(corpus_file("cloverleaf-devsync.sqlite").read_bytes())  # 2.1 MB: three 1 MiB chunks
    client = Client(svc.base, svc.token, quiet=True, backoff=(0.1,))

    def body() -> dict:
        data = MultipartBody([("job", "t")], [path], _Truncating(path))
        return {"data": data, "headers": {"Content-Type": data.content_type, "Content-Length": str(len(data))}}

    with pytest.raises(UploadError) as err:
        client._request("POST", "/api/v1/runs", body)
    assert err.value.status == 2 and "truncated while it was being sent" in str(err.value)
    assert str(path) in str(err.value) and "cannot reach" not in str(err.value)
