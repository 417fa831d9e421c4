"""Offscreen camera frames for the MuJoCo tasks, headless on the CPU.

MuJoCo picks its OpenGL backend from ``MUJOCO_GL`` once, when ``mujoco`` is first imported, so
:func:`select_gl_backend` must run before that import (``base.py`` calls it first thing). Frames
are small, so the renderer turns off what costs the most on a software rasteriser (llvmpipe):
multisampling, shadows and reflections (a 96 x 96 frame then takes 0.3 ms instead of 48 ms, see
``docs/envs/manipulation.md``).
"""

from __future__ import annotations

import ctypes.util
import os

import numpy as np


def select_gl_backend() -> None:
    """Choose an offscreen OpenGL backend for MuJoCo when there is no display and none is set.

    EGL (Mesa's software EGL works without a GPU) is preferred, OSMesa (Debian's ``libosmesa6``)
    is the fallback; the rule matches ``omnigym.platform.vec_env.set_headless_rendering``, so
    envs made with plain ``gym.make`` render like envs made by omnigym.
    """
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or "MUJOCO_GL" in os.environ:
        return
    os.environ["MUJOCO_GL"] = "egl" if ctypes.util.find_library("EGL") else "osmesa"


select_gl_backend()

import mujoco  # noqa: E402  (after the backend is chosen)


def frame_shape(size: int | tuple[int, int]) -> tuple[int, int]:
    """``(height, width)`` of an image size given as one int (square) or a pair."""
    height, width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {size}")
    return height, width


def check_camera(model: mujoco.MjModel, camera: str) -> None:
    """Raise ``ValueError`` unless ``model`` has a camera named ``camera``."""
    if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
        cameras = [model.camera(i).name for i in range(model.ncam)]
        raise ValueError(f"unknown camera {camera!r}; this task has {cameras}")


class FrameRenderer:
    """RGB frames of one camera at one size, from a model's current ``MjData``.

    Args:
        model: the compiled model; its offscreen buffer is enlarged to fit the frame if needed.
        size: ``(height, width)`` in pixels.
        camera: the name of a camera in the model.
    """

    def __init__(self, model: mujoco.MjModel, size: tuple[int, int], camera: str) -> None:
        check_camera(model, camera)
        height, width = size
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.quality.offsamples = 0
        self.camera = camera
        try:
            self._renderer = mujoco.Renderer(model, height, width, max_geom=model.ngeom + 16)
        except mujoco.FatalError as exc:
            raise mujoco.FatalError(
                f"MuJoCo cannot make an OpenGL context (MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}): {exc}. "
                "Set MUJOCO_GL=egl or MUJOCO_GL=osmesa (apt-get install libosmesa6) before anything "
                "imports mujoco."
            ) from exc
        flags = self._renderer.scene.flags
        flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0

    def render(self, data: mujoco.MjData) -> np.ndarray:
        """A new uint8 frame ``[H, W, 3]`` of ``data`` (whose kinematics must be current)."""
        self._renderer.update_scene(data, camera=self.camera)
        return self._renderer.render()

    def close(self) -> None:
        """Free the OpenGL context."""
        self._renderer.close()
