"""The programs under examples/, run as a user would run them: a subprocess against the
session server, its exit code and output checked, then what it left in Redis."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from uuid import uuid4

from redis import Redis


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_video_pipeline(redis_url: str, sync_redis: Redis) -> None:
    prefix = f"ex-{uuid4().hex[:8]}"
    done = run_example(
        "video_pipeline.py", redis_url, "--prefix", prefix, "--resolutions", "720p,1080p,480p"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("added flow: publish job ")
    assert lines[0].endswith(" waits for 3 transcodes (720p, 1080p, 480p)")
    root = lines[0].split()[4]
    assert lines[1:5] == [
        "published intro.mp4:",
        "  480p: intro-480p.mp4",
        "  720p: intro-720p.mp4",
        "  1080p: intro-1080p.mp4",
    ]
    assert lines[5] == f"publish {root} in publish: completed"
    assert [line.split()[0] for line in lines[6:]] == ["transcode"] * 3
    assert [line.rsplit(": ", 1)[1] for line in lines[6:]] == ["completed"] * 3
    assert len(lines) == 9

    # What it left in Redis: the publish job's result, and one processed value per child.
    raw = sync_redis.hgetall(f"{prefix}:publish:{root}")
    job = {_s(k): _s(v) for k, v in raw.items()}
    assert json.loads(job["returnvalue"]) == {
        "video": "intro.mp4",
        "renditions": {
            "480p": "intro-480p.mp4",
            "720p": "intro-720p.mp4",
            "1080p": "intro-1080p.mp4",
        },
    }
    processed = sync_redis.hgetall(f"{prefix}:publish:{root}:processed")
    assert {_s(k).rsplit(":", 1)[0] for k in processed} == {f"{prefix}:transcode"}
    assert sorted(json.loads(v)["resolution"] for v in processed.values()) == [
        "1080p",
        "480p",
        "720p",
    ]


def test_video_pipeline_takes_the_url_from_the_environment(redis_url: str) -> None:
    prefix = f"ex-{uuid4().hex[:8]}"
    env = {**os.environ, "ECHOMQ_REDIS_URL": redis_url}
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "video_pipeline.py"),
            "--prefix",
            prefix,
            "--video",
            "a.mov",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "  1080p: a-1080p.mp4" in done.stdout.splitlines()


def test_the_flows_guide_examples_run(redis_url: str, tmp_path: Path) -> None:
    # docs/flows.md: the video pipeline (first block) and the sync producer (last block), each
    # run as written, as a program finding the session server by the connection rule.
    text = (EXAMPLES.parent / "docs" / "flows.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    pipeline, sync = blocks[0], blocks[-1]
    for name, code in (("pipeline.py", pipeline), ("sync.py", sync)):
        (tmp_path / name).write_text(code)
    env = {**os.environ, "ECHOMQ_REDIS_URL": redis_url}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "pipeline.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = ast.literal_eval(done.stdout.strip())
    assert result["video"] == "intro"
    assert sorted(result["renditions"].values()) == [
        "intro-1080p.mp4",
        "intro-480p.mp4",
        "intro-720p.mp4",
    ]
    done = subprocess.run(
        [sys.executable, str(tmp_path / "sync.py")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    root_id, children = done.stdout.strip().split(" ", 1)
    assert len(root_id) == 36 and len(ast.literal_eval(children)) == 1
