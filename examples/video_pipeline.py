"""A video pipeline as an echomq flow: N transcodes feed one publish job.

Run it against any Redis (nothing else is needed; it runs its own workers)::

    python examples/video_pipeline.py
    python examples/video_pipeline.py redis://localhost:6379 --video intro.mp4 \
        --resolutions 480p,720p,1080p
    python examples/video_pipeline.py redis+cluster://node-1:7000 --prefix '{video}'   # Cluster

A ``FlowProducer`` adds the whole tree in one step: a ``publish`` job in the queue
``publish``, which waits in ``waiting-children``, and one ``transcode`` child per resolution
in the queue ``transcode``. A worker on each queue runs them. When the last transcode has
completed, the publish job runs and reads what its children returned with
``job.get_children_values()``. Without a URL it uses echomq's connection rule
(``echomq.default_redis_url()``): ``$ECHOMQ_REDIS_URL``, else the embedded Redis that
``echomq demo`` or ``echomq server start`` started.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import echomq

TRANSCODE, PUBLISH = "transcode", "publish"


def by_size(resolution: str) -> tuple[int, str]:
    """Sort key putting "480p" before "1080p"."""
    return len(resolution), resolution


async def transcode(job: echomq.Job) -> dict[str, Any]:
    """A child: "transcode" one video to one resolution (here: pretend, briefly)."""
    video, resolution = job.data["video"], job.data["resolution"]
    await job.log(f"transcoding {video} to {resolution}")
    await asyncio.sleep(0.05)
    stem = video.rsplit(".", 1)[0]
    return {"resolution": resolution, "file": f"{stem}-{resolution}.mp4"}


async def publish(job: echomq.Job) -> dict[str, Any]:
    """The parent: runs once every transcode has completed, and reads their results."""
    values = await job.get_children_values()  # child job key -> its return value
    renditions = {value["resolution"]: value["file"] for value in values.values()}
    ordered = sorted(renditions, key=by_size)
    return {"video": job.data["video"], "renditions": {r: renditions[r] for r in ordered}}


def pipeline(video: str, resolutions: list[str]) -> echomq.FlowJob:
    """The flow: one publish job, and one transcode child per resolution."""
    children = [
        echomq.FlowJob(
            "transcode",
            TRANSCODE,
            {"video": video, "resolution": resolution},
            attempts=3,
            backoff=1.0,
            fail_parent_on_failure=True,  # a transcode that fails for good fails the publish
        )
        for resolution in resolutions
    ]
    return echomq.FlowJob("publish", PUBLISH, {"video": video}, children=children)


def show(node: echomq.JobNode, states: dict[str, str], level: int = 0) -> None:
    job = node.job
    print(f"{'  ' * level}{job.name} {job.id} in {job.queue_name}: {states[job.id]}")
    for child in sorted(node.children, key=lambda n: by_size(n.job.data["resolution"])):
        show(child, states, level + 1)


async def states_of(node: echomq.JobNode) -> dict[str, str]:
    states = {node.job.id: str((await node.job.get_state()).value)}
    for child in node.children:
        states.update(await states_of(child))
    return states


async def main(url: str, video: str, resolutions: list[str], prefix: str) -> dict[str, Any]:
    client = echomq.client_from_url(url)
    try:
        async with (
            echomq.FlowProducer(connection=client, prefix=prefix) as producer,
            echomq.QueueEvents(PUBLISH, connection=client, prefix=prefix) as events,
            echomq.Worker(TRANSCODE, transcode, connection=client, prefix=prefix, concurrency=4),
            echomq.Worker(PUBLISH, publish, connection=client, prefix=prefix),
        ):
            root = await producer.add(pipeline(video, resolutions))
            print(
                f"added flow: publish job {root.job.id} waits for {len(root.children)} "
                f"transcodes ({', '.join(resolutions)})"
            )
            result: dict[str, Any] = await root.job.wait_until_finished(events, timeout=60)
            print(f"published {result['video']}:")
            for resolution, file in result["renditions"].items():
                print(f"  {resolution}: {file}")
            tree = await producer.get_flow(root.job.id, PUBLISH)  # read back from Redis
            if tree is not None:
                show(tree, await states_of(tree))
            return result
    finally:
        await client.aclose()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "url",
        nargs="?",
        default=None,
        help="Redis URL (default: $ECHOMQ_REDIS_URL, else the running embedded Redis)",
    )
    parser.add_argument("--video", default="intro.mp4", help="video name (default intro.mp4)")
    parser.add_argument(
        "--resolutions",
        default="480p,720p,1080p",
        help="comma-separated resolutions, one transcode each (default 480p,720p,1080p)",
    )
    parser.add_argument("--prefix", default="bull", help="key prefix (default bull)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    resolutions = [r.strip() for r in args.resolutions.split(",") if r.strip()]
    url = args.url or echomq.default_redis_url()
    asyncio.run(main(url, args.video, resolutions, args.prefix))
