"""``frames``: render frames to image files, then pack them into a zip. A known total: 900 units.

Payload (JSON, all optional): ``frames`` (default 900), ``frame_ms`` delay per frame
(default 10), and ``pause_at`` / ``pause_ms`` to hold at one frame (a slow scene; handy to
watch 450/900 = 50% or to cancel at a known point).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from jobwire.worker.sdk import Handlers, InputInvalid, JobContext, Result, ResultInvalid

handlers = Handlers()
WIDTH, HEIGHT = 96, 54
MAX_FRAMES = 100_000


@handlers.job("frames")  # the default plan: PREPARING, PROCESSING, VERIFYING, DELIVERING
def render_frames(ctx: JobContext) -> Result:
    count, frame_s, pause_at, pause_s = _params(ctx)
    frames_dir = ctx.tmp_dir / "frames"
    frames_dir.mkdir()
    ctx.stage("PROCESSING")
    for i in range(1, count + 1):
        ctx.check()
        _write_frame(frames_dir / f"frame-{i:06d}.pgm", i, count)
        ctx.progress(i, total=count)
        ctx.sleep(pause_s if i == pause_at else frame_s)  # also a safe point
    ctx.stage("VERIFYING")
    archive = _pack(ctx, frames_dir, count)
    return Result.from_file(archive, content_type="application/zip", summary=f"{count} frames, {WIDTH}x{HEIGHT}")


def _params(ctx: JobContext) -> tuple[int, float, int, float]:
    params = ctx.json()
    if not isinstance(params, dict):
        raise InputInvalid("the payload must be a JSON object")
    try:
        count = int(params.get("frames", 900))
        frame_s = float(params.get("frame_ms", 10)) / 1000
        pause_at = int(params.get("pause_at", 0))
        pause_s = float(params.get("pause_ms", 0)) / 1000
    except (TypeError, ValueError) as exc:
        raise InputInvalid("frames, frame_ms, pause_at and pause_ms must be numbers") from exc
    if not 1 <= count <= MAX_FRAMES or frame_s < 0 or pause_s < 0:
        raise InputInvalid(f"frames must be 1 to {MAX_FRAMES}; delays must not be negative")
    return count, frame_s, pause_at, pause_s


def _write_frame(path: Path, index: int, count: int) -> None:
    """A greyscale PGM: a gradient with a bar that moves across as the frames advance."""
    bar = (index * WIDTH) // count
    rows = bytearray()
    for y in range(HEIGHT):
        for x in range(WIDTH):
            rows.append(255 if abs(x - bar) < 2 else (x * 255 // WIDTH + y) % 256)
    path.write_bytes(f"P5 {WIDTH} {HEIGHT} 255\n".encode() + bytes(rows))


def _pack(ctx: JobContext, frames_dir: Path, count: int) -> Path:
    """Zip the frames, then check the archive reads back whole before it is delivered."""
    archive = ctx.tmp_dir / "frames.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i, frame in enumerate(sorted(frames_dir.iterdir()), start=1):
            ctx.check()
            zf.write(frame, frame.name)
            ctx.progress(i, total=count)
    with zipfile.ZipFile(archive) as zf:
        if zf.testzip() is not None or len(zf.namelist()) != count:
            raise ResultInvalid("the frame archive did not verify")
    return archive
