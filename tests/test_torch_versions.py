"""Entries know their versions: a paste that shows its torch version ranks the entries whose
`versions:` range excludes it after the others, and the answer says why."""

import json
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from app.torch_versions import outside_range, paste_torch_version
from tests.conftest import REPO_CONTENT, entry_text

CORPUS = Path(__file__).parent / "data" / "real-pastes"


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("PyTorch version: 2.1.0+cu121", "2.1.0"),  # collect_env
        ("torch                    2.0.1", "2.0.1"),  # pip list
        ("torch==1.10.0+cu102", "1.10.0"),  # pip freeze
        ("•  torch: 2.0.1+cu118", "2.0.1"),
        ("torch version: 2.3.1", "2.3.1"),
        ("pytorch:1.7.1   torchversion: 0.8.2", "1.7.1"),
        ("torch2.0.1 No module named 'torch._six'", "2.0.1"),
        ("pip install https://x/whl/cu75/torch-0.1.10.post2-cp27-none-linux_x86_64.whl", "0.1.10"),
        ("torch.__version__ = '2.2.0'", "2.2.0"),
    ],
)
def test_the_version_a_paste_shows_is_read(line, version):
    assert str(paste_torch_version(f"Traceback\n{line}\nValueError: x")) == version


@pytest.mark.parametrize(
    "line",
    [
        "torchvision 0.16.0",
        "torch.Size([1, 2, 3])",
        '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501',
        "torch>=1.3.0 (from torchlayers)",  # a requirement, not what is installed
        "ERROR: Could not find a version that satisfies the requirement torch==1.9.1+cu111",
        "x" * 10_000 + " torch 2.1.0",  # past the length a line is read to
    ],
)
def test_lines_that_show_no_installed_torch_version_give_none(line):
    assert paste_torch_version(line) is None


def _ranges() -> dict[str, str | None]:
    ranges = {}
    for path in REPO_CONTENT.glob("*.md"):
        front = yaml.safe_load(path.read_text(encoding="utf-8").split("---", 2)[1])
        ranges[front["id"]] = front.get("versions")
    return ranges


def test_on_real_pastes_no_labelled_entry_is_ranked_down_by_its_own_range():
    """Every real paste of the corpus that shows its version and has a label: the label's
    range holds that version, so the ranking never pushes a right answer down. (A range that
    excluded its own pastes is a wrong range: this found two, num_batches_tracked's and
    checkpoint-save-load's, whose errors older releases print too.)"""
    ranges = _ranges()
    shown = []
    for manifest in sorted(CORPUS.glob("*.json")):
        for case in json.loads(manifest.read_text(encoding="utf-8")):
            text = (CORPUS / case["file"]).read_bytes().decode("utf-8", errors="replace")
            version = paste_torch_version(text)
            if version is not None and case["expected"]:
                shown.append((case["file"], case["expected"], version))
    assert len(shown) >= 20
    wrong = [s for s in shown if outside_range(ranges[s[1]], s[2])]
    assert wrong == []


def test_a_match_outside_its_range_comes_after_one_inside_and_says_why(make_settings, content_dir):
    # Both match the paste; the old cause's longer pattern ranks it first when nothing else
    # tells them apart (and each entry's own example stays its own).
    old = (
        "signatures:\n"
        "  - exception: RuntimeError\n"
        "    message: 'the engine stalled at step (?P<n>\\d+)'\n"
        "    example: 'RuntimeError: the engine stalled at step 3'\n"
    )
    new = (
        "signatures:\n"
        "  - exception: RuntimeError\n"
        "    message: 'engine stalled'\n"
        "    example: 'RuntimeError: engine stalled'\n"
    )
    (content_dir / "old-cause.md").write_text(
        entry_text("old-cause", extra_front="versions: '<2.0'\n", signatures=old),
        encoding="utf-8",
    )
    (content_dir / "new-cause.md").write_text(
        entry_text(
            "new-cause",
            title="The same error, of the 2.x engine",
            extra_front="versions: '>=2.0'\n",
            signatures=new,
        ),
        encoding="utf-8",
    )
    from app.web import create_app

    with TestClient(create_app(make_settings(content_dir))) as client:
        for shown, first, second in [
            ("1.13.1", "old-cause", "new-cause"),
            ("2.4.0", "new-cause", "old-cause"),
        ]:
            paste = f"torch=={shown}\nRuntimeError: the engine stalled at step 7"
            matches = client.post("/api/v1/match", json={"text": paste}).json()["matches"]
            assert [m["id"] for m in matches] == [first, second]
            assert matches[0]["version_note"] is None
            assert matches[1]["version_note"] == (
                f"This entry is about torch {'>=2.0' if second == 'new-cause' else '<2.0'}; "
                f"the paste shows torch {shown}."
            )
        page = client.post(
            "/match", data={"text": "torch 1.13.1\nRuntimeError: the engine stalled at step 7"}
        )
        assert "the paste shows torch 1.13.1" in page.text
