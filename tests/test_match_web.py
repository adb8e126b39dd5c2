"""Paste a traceback through HTTP and the CLI: the answer, its limits, and nothing stored."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import cli

MODULE_PREFIX = 'Traceback (most recent call last):\n  File "/home/u/load.py", line 9, in <module>\n    model.load_state_dict(sd)\nRuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: "conv1.weight". \n\tUnexpected key(s) in state_dict: "module.conv1.weight". \n'
UNKNOWN = (
    "Traceback (most recent call last):\n  File \"p.py\", line 3, in <module>\nKeyError: 'price'\n"
)


def test_api_answers_json_with_why_captures_and_fix(shared_client):
    response = shared_client.post("/api/v1/match", json={"text": MODULE_PREFIX})
    assert response.status_code == 200
    answer = response.json()
    assert answer["known"] is True
    (best, *_) = answer["matches"]
    assert (
        best["id"] == "state-dict-module-prefix"
        and best["url"] == "/entries/state-dict-module-prefix"
    )
    assert 0.5 <= best["confidence"] <= 1
    assert best["why"]["matched_in"] == "final"
    assert "module.conv1.weight" in best["why"]["matched_text"]
    assert "module.conv1.weight" in best["captures"].values()
    assert best["fix_markdown"] and "<pre" in best["fix_html"]
    assert any(s["role"] == "fix" for s in best["snippets"])
    parsed = answer["parsed"]
    assert parsed["exceptions"][0]["type"] == "RuntimeError"
    assert parsed["user_frame"]["file"] == "/home/u/load.py"
    assert answer["related"] == []


def test_api_takes_text_plain_and_says_plainly_when_nothing_is_known(shared_client):
    response = shared_client.post(
        "/api/v1/match", content=UNKNOWN, headers={"Content-Type": "text/plain"}
    )
    answer = response.json()
    assert answer["known"] is False and answer["matches"] == []
    assert answer["message"] == "No known pitfall matches this error."
    assert all(set(r) == {"id", "title", "summary", "url", "score"} for r in answer["related"])


def test_api_errors_have_the_one_shape(shared_client):
    bad_json = shared_client.post(
        "/api/v1/match", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert bad_json.status_code == 400 and bad_json.json()["error"]["status"] == 400
    no_text = shared_client.post("/api/v1/match", json={"txt": "x"})
    assert no_text.status_code == 422
    assert no_text.json()["error"]["message"].startswith('Send a JSON object with a "text" string')


def test_oversized_paste_gets_413_with_a_message(real_client, real_settings):
    big = "x" * (real_settings.max_paste_bytes + 1)
    response = real_client.post(
        "/api/v1/match", content=big, headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 413
    assert "larger than 1,000,000 bytes" in response.json()["error"]["message"]

    def chunks():  # no Content-Length: the limit holds while reading
        for _ in range(20):
            yield b"y" * 100_000

    streamed = real_client.post(
        "/api/v1/match", content=chunks(), headers={"Content-Type": "text/plain"}
    )
    assert streamed.status_code == 413
    page = real_client.post(
        "/match",
        content=b"text=" + b"z" * 1_100_000,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert page.status_code == 413 and "larger than" in page.text


def test_invalid_utf8_and_binary_input_still_get_an_answer(shared_client):
    body = MODULE_PREFIX.encode() + b"\xff\xfe\x00\x81 trailing bytes"
    answer = shared_client.post(
        "/api/v1/match", content=body, headers={"Content-Type": "text/plain"}
    ).json()
    assert answer["matches"][0]["id"] == "state-dict-module-prefix"
    binary = bytes(range(256)) * 40
    response = shared_client.post(
        "/api/v1/match", content=binary, headers={"Content-Type": "application/octet-stream"}
    )
    assert response.status_code == 200 and response.json()["known"] is False


def test_match_page_works_without_javascript(shared_client):
    form = shared_client.get("/match")
    assert form.status_code == 200 and '<form method="post" action="/match"' in form.text
    page = shared_client.post("/match", data={"text": MODULE_PREFIX})
    assert page.status_code == 200
    assert "What we read" in page.text and "/home/u/load.py" in page.text
    assert '<a href="/entries/state-dict-module-prefix">' in page.text
    assert "<mark>" in page.text and "module.conv1.weight" in page.text
    # The answer is in the server's HTML; the only scripts are external files the page does not
    # need: the theme (light/dark) and app.js.
    scripts = re.findall(r"<script[^>]*>", page.text)
    assert len(scripts) == 2 and "<script>" not in page.text
    assert all(
        re.fullmatch(r'<script src="[^"]*/static/(theme|app)\.js"( defer)?>', s) for s in scripts
    )
    unknown = shared_client.post("/match", data={"text": UNKNOWN})
    assert "No known pitfall matches this error." in unknown.text


def test_match_page_folds_library_frames_and_puts_the_users_last_frame_first(shared_client):
    paste = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/<b>train</b>.py", line 30, in <module>\n'
        '    main("<script>alert(1)</script>")\n'
        '  File "/home/u/<b>train</b>.py", line 12, in main\n'
        "    y = net(x)  # <i>here</i>\n"
        '  File "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _call_impl\n'
        "    return forward_call(*args, **kwargs)\n"
        '  File "/usr/lib/python3.11/site-packages/torch/_tensor.py", line 20, in view\n'
        "    return x.view(-1)  # <img src=x onerror=alert(2)>\n"
        "RuntimeError: view size is not compatible with input tensor's size and stride (at least "
        "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.\n"
    )
    page = shared_client.post("/match", data={"text": paste})
    assert page.status_code == 200
    read = page.text[page.text.index('id="read-h"') :]
    read = read[: read.index("</section>")]
    # The user's last frame first, with its code line, everything from the paste escaped.
    last = read.index('class="last-frame"')
    assert "/home/u/&lt;b&gt;train&lt;/b&gt;.py, line 12, in main" in read[last : last + 200]
    assert "y = net(x)  # &lt;i&gt;here&lt;/i&gt;" in read
    assert last < read.index("<details>")
    # The two torch frames are one folded run, there to open, their code escaped too.
    (folded,) = re.findall(r"<details><summary>(.*?)</summary>", read)
    assert folded == "… 2 library frames folded"
    assert "return x.view(-1)  # &lt;img src=x onerror=alert(2)&gt;" in read
    assert "main(&#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;)" in read
    for raw in ("<b>", "<i>", "<img", "<script>"):
        assert raw not in read


def test_a_signature_that_matches_an_empty_message_is_shown_not_a_500(shared_client):
    """A bare `StopIteration` from a DataLoader is matched by a pattern for an empty message."""
    paste = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 134, in train\n'
        "    images, targets = next(batch_iterator)\n"
        '  File "/env/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 676, in _next_data\n'
        "    index = self._next_index()\n"
        "StopIteration\n"
    )
    page = shared_client.post("/match", data={"text": paste})
    assert page.status_code == 200
    assert '<a href="/entries/dataloader-iterate-restart">' in page.text
    assert "<code>StopIteration: </code>" in page.text


def test_the_paste_is_not_stored(real_client, real_settings):
    marker = "UNIQUE_MARKER_7f3a9c"
    real_client.post("/api/v1/match", json={"text": MODULE_PREFIX + marker})
    real_client.post("/match", data={"text": UNKNOWN + marker})
    for path in Path(real_settings.data_dir).rglob("*"):
        if path.is_file():
            assert marker.encode() not in path.read_bytes(), path


def test_cli_match_exit_codes_and_json(real_settings, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("PITFALLS_DATA_DIR", str(real_settings.data_dir))
    monkeypatch.setenv("PITFALLS_CONTENT_DIR", str(real_settings.content_dir))
    paste = tmp_path / "trace.txt"
    paste.write_text(MODULE_PREFIX)
    runner = CliRunner()
    result = runner.invoke(cli, ["match", str(paste), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["matches"][0]["id"] == "state-dict-module-prefix"
    assert set(answer) >= {"matches", "related", "parsed"}
    human = runner.invoke(cli, ["match", "-"], input=MODULE_PREFIX)
    assert human.exit_code == 0 and "key: module.conv1.weight" in human.output
    unknown = runner.invoke(cli, ["match", "-"], input=UNKNOWN)
    assert unknown.exit_code == 1 and "No known pitfall matches this error." in unknown.output
    assert (
        runner.invoke(cli, ["match", "-", "--server", "http://127.0.0.1:9"], input="x").exit_code
        == 2
    )


@pytest.mark.slow  # starts real processes
def test_cli_run_passes_output_through_and_explains_a_failure(real_settings, tmp_path: Path):
    env = {
        "PITFALLS_DATA_DIR": str(real_settings.data_dir),
        "PITFALLS_CONTENT_DIR": str(real_settings.content_dir),
    }
    script = tmp_path / "fail.py"
    script.write_text(
        "print('step 1 ok', flush=True)\nraise ValueError('optimizer got an empty parameter list')\n"
    )
    pitfalls = [sys.executable, "-c", "from app.cli import main; main()"]
    import os

    failed = subprocess.run(
        [*pitfalls, "run", "--", sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert failed.returncode == 1
    assert failed.stdout == "step 1 ok\n"
    assert "ValueError: optimizer got an empty parameter list" in failed.stderr
    explained = failed.stderr.split("--- pitfalls ---")[1]
    assert "[parameter-registration" in explained
    # The user's last frame, with its code line, under the answer's first line.
    assert explained.splitlines()[2:4] == [
        f"  Your last frame: {script}, line 2, in <module>",
        "      raise ValueError('optimizer got an empty parameter list')",
    ]
    ok = subprocess.run(
        [*pitfalls, "run", "--", sys.executable, "-c", "import sys; sys.exit(0)"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert ok.returncode == 0 and "--- pitfalls ---" not in ok.stderr
    missing = subprocess.run(
        [*pitfalls, "run", "--", "no-such-command-xyz"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert missing.returncode == 127


def test_error_text_in_the_search_box_is_matched_before_it_is_searched(shared_client):
    error = "RuntimeError: CUDA error: device-side assert triggered"
    page = shared_client.get("/search", params={"q": error})
    assert page.status_code == 200
    text = page.text
    assert "Read as an error: Known pitfall:" in text
    section = text[
        text.index('class="as-error"') : text.index("</section>", text.index("as-error"))
    ]
    assert 'href="/entries/cuda-device-side-assert"' in section
    for query in ("contiguous", "KeyError"):  # no error, or one that nothing matches
        plain = shared_client.get("/search", params={"q": query})
        assert plain.status_code == 200 and "as-error" not in plain.text
