"""Pixel world model: a DIAMOND-style diffusion model of FrozenLake's frames, trained on a CPU.

The game: ``omnigym/FrozenLake-v0`` with image observations only, 8-pixel tiles (32x32 RGB frames of
a random 4x4 lake per reset) and non-slippery ice (deterministic moves, so open-loop frames can be
compared with the real ones). Episodes are capped at ``HORIZON`` steps here and in the model.

1. Data: real episodes of five policies that read the frame (``frame_policy``: the frame parsed
   into tiles, then a shortest path to the goal around the holes): ``solver`` (that path),
   ``eps0.25`` / ``eps0.5`` (a uniform random move with that probability), ``random`` and
   ``cautious`` (uniform over the moves that do not step into a hole).
2. The ``diffusion`` world model (configs/world_model/diffusion.yaml, L = 4, 3 Euler steps)
   trained for a fixed number of steps (``fit_diffusion_world_model``).
3. Open loop: from the first frame of held-out ``cautious`` episodes that last >= 20 steps, the
   model is fed the real actions for 20 steps, never corrected; per-step PSNR (of the MSE pooled
   over episodes) and SSIM of its frames against the real ones (and, as a floor, of the unchanged
   start frame), and a side-by-side MP4 (real | imagined, 4x upscaled) of the first episodes.
4. Ranking: ``solver``, ``eps0.25``, ``eps0.5`` and ``random`` each play the same start states
   (reset seeds) in the real env and in the model, acting on the model's imagined frames; mean
   returns and their Spearman rank correlation (target >= 0.8).

``ratio`` = that Spearman correlation. The last line is one JSON object with every figure.
Full: 600 training episodes, 4,000 steps of 32 transitions, 32 episodes per policy and 32 open-loop
episodes. ``--quick``: 240 episodes, 700 steps of 32, 12 episodes per policy, 8 open-loop episodes,
and a U-Net of half the widths (``QUICK_SETTINGS``: a smoke run under 5 minutes, not the measurement).

Usage: ``omnigym bench pixel_world_model [--quick] [--out DIR]``
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

DURATIONS = {"quick": "227 s", "full": "not recorded"}
"""On 2 shared CPU cores, one thread: docs/world_models.md; full never run (estimated 40-45 min)."""

ENV_ID = "omnigym/FrozenLake-v0"
ENV_KWARGS: dict[str, Any] = {"obs_keys": ("image",), "tile_size": 8, "is_slippery": False}
HORIZON = 30
"""Steps per episode at most, in the real env and in the model."""
OPEN_LOOP_STEPS = 20
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))
"""Cell offsets of the actions up, down, left, right (omnigym's grid games)."""
RANK_POLICIES = {"solver": 0.0, "eps0.25": 0.25, "eps0.5": 0.5, "random": 1.0}
"""Ranked policies and their probability of a uniform random move."""
EVAL_SEED = 1_000_000
SETTINGS = ("learning_rate=3e-4",)
"""Settings over configs/world_model/diffusion.yaml: a larger step size for the short CPU budget."""
QUICK_SETTINGS = ("channels=[16,32,32]",)
"""``--quick`` also halves the U-Net's widths (about 2x faster per step) to stay under 5 minutes."""
Policy = Callable[[np.ndarray, np.random.Generator], int]


# --- policies that read the frame --------------------------------------------------------------
def parse_frame(frame: np.ndarray, tiles: np.ndarray) -> np.ndarray:
    """The tile code of every cell: the nearest (L2) tile of FrozenLake's tile sheet. Shape: [rows, cols]."""
    tile = tiles.shape[1]
    rows, cols = frame.shape[0] // tile, frame.shape[1] // tile
    cells = frame.reshape(rows, tile, cols, tile, 3).transpose(0, 2, 1, 3, 4).astype(np.float32)
    distance = ((cells[:, :, None] - tiles[None, None].astype(np.float32)) ** 2).sum(axis=(3, 4, 5))
    return distance.argmin(-1)


def first_moves(codes: np.ndarray) -> tuple[list[int], list[int]]:
    """``(moves on a shortest path to the goal around holes, moves that do not enter a hole)``."""
    from omnigym.envs.games import frozenlake as fl

    player = np.argwhere(np.isin(codes, [fl.PLAYER_TILE, fl.PLAYER_IN_HOLE_TILE, fl.PLAYER_ON_GOAL_TILE]))
    holes = np.isin(codes, [fl.HOLE_TILE, fl.PLAYER_IN_HOLE_TILE])
    goal = np.isin(codes, [fl.GOAL_TILE, fl.PLAYER_ON_GOAL_TILE])
    if len(player) == 0:
        return [], list(range(4))  # no player drawn (a model failure): nothing to plan from
    start = tuple(player[0])

    def neighbour(cell: tuple[int, int], move: int) -> tuple[int, int]:
        r, c = cell[0] + MOVES[move][0], cell[1] + MOVES[move][1]
        return (r, c) if 0 <= r < codes.shape[0] and 0 <= c < codes.shape[1] else cell

    safe = [m for m in range(4) if not holes[neighbour(start, m)]] or list(range(4))
    first: dict[tuple[int, int], int | None] = {start: None}
    queue = deque([start])
    while queue:  # breadth-first search, remembering each cell's first move from the start
        cell = queue.popleft()
        step = first[cell]
        if goal[cell] and step is not None:
            return [step], safe
        for move in range(4):
            nxt = neighbour(cell, move)
            if nxt not in first and not holes[nxt]:
                first[nxt] = move if first[cell] is None else first[cell]
                queue.append(nxt)
    return [], safe


def frame_policy(epsilon: float, cautious: bool = False) -> Policy:
    """Shortest path to the goal, or with probability ``epsilon`` a uniform random move.

    ``cautious``: uniform over the moves that do not enter a hole instead of the path.
    """
    from omnigym.envs.games.frozenlake import tile_sheet

    tiles = tile_sheet(ENV_KWARGS["tile_size"]).tiles

    def act(frame: np.ndarray, rng: np.random.Generator) -> int:
        path, safe = first_moves(parse_frame(frame, tiles))
        explore = rng.random() < epsilon
        if cautious:
            return int(rng.choice(safe))
        if explore or not path:
            return int(rng.integers(4))
        return path[0]

    return act


# --- real episodes -----------------------------------------------------------------------------
def real_episode(env: Any, policy: Policy, seed: int, horizon: int = HORIZON) -> dict[str, Any]:
    """One episode (Minari layout) of ``policy`` from ``env.reset(seed=seed)``, at most ``horizon`` steps."""
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    frames, actions, rewards, ends = [obs["image"]], [], [], []
    for _ in range(horizon):
        action = policy(frames[-1], rng)
        obs, reward, terminated, truncated, _ = env.step(action)
        frames.append(obs["image"])
        actions.append(action)
        rewards.append(reward)
        ends.append(terminated)
        if terminated or truncated:
            break
    return {
        "observations": {"image": np.stack(frames)},
        "actions": np.array(actions, dtype=np.int64),
        "rewards": np.array(rewards, dtype=np.float32),
        "terminations": np.array(ends, dtype=bool),
    }


def collect(env: Any, num_episodes: int, seed: int) -> list[dict[str, Any]]:
    """``num_episodes`` real episodes, the five data policies in turn."""
    policies = [frame_policy(e) for e in RANK_POLICIES.values()] + [frame_policy(0.0, cautious=True)]
    return [real_episode(env, policies[i % len(policies)], seed + i) for i in range(num_episodes)]


def long_episodes(env: Any, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` held-out ``cautious`` episodes that last at least ``OPEN_LOOP_STEPS`` steps."""
    policy, found, offset = frame_policy(0.0, cautious=True), [], 0
    while len(found) < count:
        episode = real_episode(env, policy, seed + offset, horizon=OPEN_LOOP_STEPS)
        offset += 1
        if len(episode["actions"]) == OPEN_LOOP_STEPS:
            found.append(episode)
    return found


# --- the model ---------------------------------------------------------------------------------
def open_loop(model: Any, episodes: list[dict[str, Any]], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Imagined frames ``[N, K + 1, H, W, C]`` under the real actions, and the real ones (same shape)."""
    import torch

    real = np.stack([e["observations"]["image"] for e in episodes])
    actions = torch.as_tensor(np.stack([e["actions"] for e in episodes]))
    generator = torch.Generator().manual_seed(seed)
    state = model.reset({"image": torch.as_tensor(real[:, 0])})
    imagined = [real[:, 0]]
    for k in range(OPEN_LOOP_STEPS):
        state, obs, *_ = model.step(state, actions[:, k], generator=generator)
        imagined.append(obs["image"].numpy())
    return np.stack(imagined, axis=1), real


def frame_scores(imagined: np.ndarray, real: np.ndarray) -> dict[str, list[float]]:
    """Per-step PSNR and mean SSIM of the imagined frames, and of the unchanged start frame.

    PSNR is that of the step's MSE pooled over the episodes (the frames tiled into one image): a
    per-image PSNR is infinite wherever a frame is reproduced exactly, which the start frame often is.
    """
    import torch

    from omnigym.world_models.pixel_metrics import psnr, ssim

    out: dict[str, list[float]] = {"psnr": [], "ssim": [], "psnr_copy": [], "ssim_copy": []}
    for k in range(1, real.shape[1]):
        truth = torch.as_tensor(real[:, k])
        for name, guess in (("", torch.as_tensor(imagined[:, k])), ("_copy", torch.as_tensor(real[:, 0]))):
            out[f"psnr{name}"].append(float(psnr(guess.flatten(0, 1)[None], truth.flatten(0, 1)[None])))
            out[f"ssim{name}"].append(float(ssim(guess, truth).mean()))
    return out


def model_returns(model: Any, env: Any, policy: Policy, seeds: list[int], generator_seed: int) -> list[float]:
    """Returns of ``policy`` in the model, one batched rollout from the real resets of ``seeds``."""
    import torch

    starts = np.stack([env.reset(seed=s)[0]["image"] for s in seeds])
    rngs = [np.random.default_rng(s) for s in seeds]
    generator = torch.Generator().manual_seed(generator_seed)
    state = model.reset({"image": torch.as_tensor(starts)})
    frames, returns, alive = starts, np.zeros(len(seeds)), np.ones(len(seeds), dtype=bool)
    for _ in range(HORIZON):
        actions = torch.tensor([policy(frame, rng) for frame, rng in zip(frames, rngs, strict=True)])
        state, obs, reward, terminated, _ = model.step(state, actions, generator=generator)
        returns += np.where(alive, reward.numpy(), 0.0)
        alive &= ~terminated.numpy()
        frames = obs["image"].numpy()
        if not alive.any():
            break
    return returns.tolist()


def write_side_by_side(imagined: np.ndarray, real: np.ndarray, path: Path, rows: int = 4) -> Path:
    """An MP4 of ``rows`` episodes, each row real | imagined, upscaled 4x (nearest)."""
    from omnigym.platform.loggers import write_video

    pair = np.concatenate([real[:rows], np.full_like(real[:rows, :, :, :2], 255), imagined[:rows]], axis=3)
    grid = np.concatenate(list(pair), axis=1)  # episodes stacked vertically: [K + 1, rows * H, W', C]
    big = grid.repeat(4, axis=1).repeat(4, axis=2)
    return write_video(list(big), path, fps=2)


def train_model(
    episodes: list[dict[str, Any]],
    steps: int,
    batch_size: int,
    space: Any,
    action_space: Any,
    overrides: list[str],
) -> tuple[Any, dict]:
    """The diffusion world model of configs/world_model/diffusion.yaml (with ``overrides``), fitted."""
    import torch

    from omnigym.core.config import apply_overrides, build_dataclass, load_yaml
    from omnigym.core.registry import WORLD_MODELS
    from omnigym.platform.experiment import config_dir
    from omnigym.world_models.diffusion_data import fit_diffusion_world_model

    cls = WORLD_MODELS.get("diffusion")
    settings = apply_overrides(load_yaml(config_dir() / "world_model" / "diffusion.yaml"), overrides)
    config = build_dataclass(cls.config_class, settings, path="world_model")
    torch.manual_seed(0)
    model = cls(config, space, action_space)
    log = lambda step, m: print(  # noqa: E731
        f"step {step}: denoising {m['train/loss_denoising']:.4f}, next-frame MSE "
        f"{m['eval/next_frame_mse']:.4f} (copy {m['eval/copy_frame_mse']:.4f}), reward acc "
        f"{m['eval/reward_accuracy']:.3f}, end acc {m['eval/termination_accuracy']:.3f}",
        flush=True,
    )
    metrics = fit_diffusion_world_model(
        model, episodes, max_steps=steps, batch_size=batch_size, eval_every=max(steps // 4, 1), callback=log
    )
    return model, metrics


def main() -> None:
    """Collect, train, open-loop scores and video, policy ranking. The last line is JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="240 episodes, 700 steps of 32, 12 per policy")
    parser.add_argument("--out", default="runs/bench_pixel_world_model", help="model, video and figures")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default 4,000; quick: 700)")
    parser.add_argument(
        "--set", nargs="*", default=[], help="world-model settings over the YAML and SETTINGS"
    )
    args = parser.parse_args()
    import torch

    from omnigym.platform.vec_env import make_env
    from omnigym.world_models.fidelity import spearman

    torch.set_num_threads(1)
    num_episodes, steps, batch_size, rank_episodes, open_episodes = (
        (240, 700, 32, 12, 8) if args.quick else (600, 4000, 32, 32, 32)
    )
    steps = args.steps or steps
    out = Path(args.out)
    start = time.perf_counter()
    env = make_env(ENV_ID, **ENV_KWARGS)
    data = collect(env, num_episodes, seed=0)
    print(
        f"collected {num_episodes} episodes, {sum(len(e['actions']) for e in data)} transitions", flush=True
    )
    settings = [*SETTINGS, *(QUICK_SETTINGS if args.quick else ()), *args.set]
    model, fit = train_model(data, steps, batch_size, env.observation_space, env.action_space, settings)
    train_seconds = time.perf_counter() - start
    model.save_pretrained(out / "model")

    imagined, real = open_loop(model, long_episodes(env, open_episodes, seed=500_000), seed=0)
    scores = frame_scores(imagined, real)
    video = write_side_by_side(imagined, real, out / "real_vs_imagined.mp4")
    for k in (1, 5, 10, 20):
        psnr_k, ssim_k = scores["psnr"][k - 1], scores["ssim"][k - 1]
        floor = f"start frame {scores['psnr_copy'][k - 1]:.2f} dB, {scores['ssim_copy'][k - 1]:.3f}"
        print(f"open loop step {k}: PSNR {psnr_k:.2f} dB, SSIM {ssim_k:.3f} ({floor})")

    seeds = [EVAL_SEED + i for i in range(rank_episodes)]
    ranking = {}
    for name, epsilon in RANK_POLICIES.items():
        policy = frame_policy(epsilon)
        real_return = float(np.mean([real_episode(env, policy, s)["rewards"].sum() for s in seeds]))
        dream_return = float(np.mean(model_returns(model, env, policy, seeds, generator_seed=1)))
        ranking[name] = {"real": real_return, "model": dream_return}
        print(f"{name}: real return {real_return:.3f}, model return {dream_return:.3f}", flush=True)
    rho = spearman([r["model"] for r in ranking.values()], [r["real"] for r in ranking.values()])
    figures = {
        "bench": "pixel_world_model",
        "ratio": rho,
        "ratio_meaning": "Spearman rank correlation of 4 policies' model vs real returns (target >= 0.8)",
        "spearman": rho,
        "policy_returns": ranking,
        "psnr_per_step": scores["psnr"],
        "ssim_per_step": scores["ssim"],
        "psnr_start_frame_per_step": scores["psnr_copy"],
        "ssim_start_frame_per_step": scores["ssim_copy"],
        "settings": settings,
        "fit": fit,
        "train_seconds": train_seconds,
        "wall_seconds": time.perf_counter() - start,
        "video": str(video),
        "torch_threads": torch.get_num_threads(),
        "quick": args.quick,
    }
    (out / "figures.json").write_text(json.dumps(figures, indent=2))
    env.close()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
