"""Scripted experts for the manipulation tasks, as registered policies.

``pusht_expert``, ``reach_expert``, ``pushcube_expert``, ``pushcube_two_stage_expert`` and
``pickplace_expert`` read the privileged
``state`` observation (object and goal poses; layouts in ``pusht.py``, ``tabletop.py`` and
``cube.py``) and need no other key, so they drive the state and the pixel variants alike. They
are deterministic functions of the observation; acting with ``deterministic=False`` adds Gaussian
noise of ``noise_std`` to the [-1, 1] actions (diverse demonstrations for imitation learning,
``omnigym collect --stochastic``). Success rates are measured in ``tests/envs/manipulation``.

In a text-action env (``action_space="text"``) the tabletop experts write skills instead
(``skills.py``), chosen from the same decisions as their [-1, 1] actions (one phase of the task
per skill: ``move_to`` a waypoint, ``push``, ``grasp``, ``release``); acting stochastically then
adds Gaussian noise of ``noise_std * MAX_STEP`` (0.5 cm) to the skills' numbers. This is how
``omnigym collect`` writes skill-text demonstrations for ``omnigym vlm sft``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import OBS_STATE, Obs, PolicyStep
from omnigym.envs.manipulation import cube, gym_pusht, pusht, tabletop, two_stage
from omnigym.envs.manipulation.pushing import PushPlanner
from omnigym.envs.manipulation.skills import CM, Skill, format_skill
from omnigym.envs.manipulation.tabletop import move_action


@dataclass
class ExpertConfig(PolicyConfig):
    """A scripted expert's settings."""

    noise_std: float = 0.1
    """Standard deviation of the Gaussian noise added to the [-1, 1] actions when acting
    stochastically (0.1 is 5 mm of gripper travel per step on the tabletop tasks)."""


@dataclass
class PushTExpertConfig(ExpertConfig):
    """``pusht_expert``; its actions are absolute positions, so its noise is smaller."""

    type: str = "pusht_expert"
    noise_std: float = 0.01
    """0.01 is 3.8 mm of pusher target."""


@dataclass
class GymPushTExpertConfig(ExpertConfig):
    """``gym_pusht_expert``; 0.01 is 2.6 px of agent target (of 512)."""

    type: str = "gym_pusht_expert"
    noise_std: float = 0.01


@dataclass
class ReachExpertConfig(ExpertConfig):
    """``reach_expert``."""

    type: str = "reach_expert"


@dataclass
class PushCubeExpertConfig(ExpertConfig):
    """``pushcube_expert``."""

    type: str = "pushcube_expert"


@dataclass
class PushCubeTwoStageExpertConfig(ExpertConfig):
    """``pushcube_two_stage_expert``."""

    type: str = "pushcube_two_stage_expert"


@dataclass
class PickPlaceExpertConfig(ExpertConfig):
    """``pickplace_expert``."""

    type: str = "pickplace_expert"


class ScriptedExpert(Policy):
    """Base of the experts: checks the spaces, turns states into actions, adds the noise."""

    config: ExpertConfig
    config_class: ClassVar[type[PolicyConfig]] = ExpertConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    state_dim: ClassVar[int] = 0
    action_dim: ClassVar[int] = 0
    state_key: ClassVar[str] = OBS_STATE
    """The observation key the expert reads (a privileged one where the task's ``state`` is partial)."""

    def __init__(
        self, config: ExpertConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        state = observation_space.spaces.get(self.state_key)
        if state is None or state.shape != (self.state_dim,):
            made_with = f" (make the env with privileged=['{self.state_key}'])" if self.env_kwargs else ""
            raise ValueError(
                f"{self.name} reads the task's {self.state_key!r} observation ({self.state_dim} values)"
                f"{made_with}"
            )
        self.writes_skills = isinstance(action_space, spaces.Text) and spaces.Text in self.action_spaces
        """Whether the env takes written skills (``action_space="text"``) instead of numbers."""
        box = isinstance(action_space, spaces.Box) and action_space.shape == (self.action_dim,)
        if not box and not self.writes_skills:
            text = " or text" if spaces.Text in self.action_spaces else ""
            kinds = f"a Box of shape ({self.action_dim},){text}"
            raise ValueError(f"{self.name} acts in {kinds}, not {action_space}")
        if config.noise_std < 0:
            raise ValueError(f"noise_std must be >= 0, got {config.noise_std}")

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """The expert's actions for a batch of observations (noisy unless ``deterministic``).

        In a text env: a list of ``B`` skills written out (``skills.format_skill``).
        """
        state = obs[self.state_key].detach().cpu().numpy().astype(np.float64)
        noisy = not deterministic and self.config.noise_std > 0
        batch = state.shape[0]
        action: Any
        if self.writes_skills:
            written = self.skills(state)
            action = [format_skill(self._perturbed(skill) if noisy else skill) for skill in written]
        else:
            action = torch.from_numpy(self.actions(state)).float()
            if noisy:
                action = (action + self.config.noise_std * torch.randn_like(action)).clamp(-1.0, 1.0)
        return PolicyStep(
            action=action, logprob=torch.zeros(batch, 1), mask=torch.ones(batch, 1, dtype=torch.bool)
        )

    def actions(self, state: np.ndarray) -> np.ndarray:
        """Noise-free actions in [-1, 1] for states ``[B, state_dim]``. Shape: [B, action_dim]."""
        raise NotImplementedError

    def skills(self, state: np.ndarray) -> list[Skill]:
        """Noise-free skills for states ``[B, state_dim]`` (tabletop experts), one per row."""
        raise NotImplementedError

    def _perturbed(self, skill: Skill) -> Skill:
        """``skill`` with ``noise_std * MAX_STEP`` of Gaussian noise on its numbers (cm), in bounds."""
        if not skill.args:
            return skill
        noise = self.config.noise_std * tabletop.MAX_STEP / CM * torch.randn(len(skill.args)).numpy()
        values = np.asarray(skill.args) + noise
        if skill.name == "move_to":
            values = np.clip(values, tabletop.TCP_LOW / CM, tabletop.TCP_HIGH / CM)
        return Skill(skill.name, tuple(float(v) for v in values))


# --- tabletop -------------------------------------------------------------------------------------
GRIP_OPEN, GRIP_CLOSED = 1.0, -1.0
SAFE_HEIGHT = 0.075
"""TCP height at which the finger pads pass over the cube (its top is at 0.04 m)."""
PAD_REACH = 0.012
"""Half the closed finger pads' footprint (m)."""


FINGERS_OPEN_GAP = 2 * tabletop.FINGER_OPEN - 0.005
"""Pad gap above which the fingers count as open (m)."""
FINGERS_CLOSED_GAP = 0.005
"""Pad gap below which the fingers count as closed (m)."""


def _move_to(point: np.ndarray) -> Skill:
    """``move_to`` a point (m), clipped to the workspace as the env clips a Box action's target."""
    return Skill("move_to", _cm(np.clip(point, tabletop.TCP_LOW, tabletop.TCP_HIGH)))


def _cm(point: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) / CM for v in point)


class ReachExpert(ScriptedExpert):
    """Straight to the goal."""

    name: ClassVar[str] = "reach_expert"
    config_class: ClassVar[type[PolicyConfig]] = ReachExpertConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Text)
    state_dim: ClassVar[int] = tabletop.GRIPPER_STATE_DIM
    action_dim: ClassVar[int] = 4

    def actions(self, state: np.ndarray) -> np.ndarray:
        """TCP towards the goal at full speed, fingers open."""
        move = move_action(state[:, tabletop.TCP], state[:, tabletop.GOAL])
        return np.concatenate([move, np.full((len(state), 1), GRIP_OPEN)], axis=1)

    def skills(self, state: np.ndarray) -> list[Skill]:
        """``move_to`` the goal."""
        return [_move_to(row[tabletop.GOAL]) for row in state]


class PushCubeExpert(ScriptedExpert):
    """Closed fingers behind the cube, then push it along the cube-goal line.

    Each step is chosen from the state alone: push when the TCP is low, behind the cube and on the
    line to the goal; otherwise lift clear of the cube, fly to a point behind it and descend.
    Written skills: ``grasp`` (to close the fingers) first, then each waypoint as a ``move_to``,
    and each push as a ``push`` of the cube's whole way to the goal (at most ``skill_push`` m).
    """

    name: ClassVar[str] = "pushcube_expert"
    config_class: ClassVar[type[PolicyConfig]] = PushCubeExpertConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Text)
    state_dim: ClassVar[int] = cube.STATE_DIM
    action_dim: ClassVar[int] = 4
    push_height: ClassVar[float] = cube.CUBE_HALF
    standoff: ClassVar[float] = 0.03
    """Gap between the pads and the cube before a push (m)."""
    lateral_tolerance: ClassVar[float] = 0.012
    push_step: ClassVar[float] = 0.025
    """How far ahead of the cube's back face the TCP is sent while pushing (m)."""
    skill_push: ClassVar[float] = 0.08
    """``push_step`` of a written ``push`` skill, which runs open loop (m)."""
    clearance: ClassVar[float] = 0.01
    """Margin (m) around the cube and the pads within which a low TCP lifts straight up before it
    flies on (a flight from there would sweep the pads through the cube)."""

    def actions(self, state: np.ndarray) -> np.ndarray:
        """One action per row, fingers closed (the pads make a paddle)."""
        out = np.empty((len(state), 4))
        out[:, 3] = GRIP_CLOSED
        for i, row in enumerate(state):
            target, speed, _ = self._waypoint(row[tabletop.TCP], row[cube.CUBE_POS], row[tabletop.GOAL])
            out[i, :3] = move_action(row[tabletop.TCP], target, speed)
        return out

    def skills(self, state: np.ndarray) -> list[Skill]:
        """One skill per row: close the fingers, else push or ``move_to`` the next waypoint."""
        out = []
        for row in state:
            tcp = row[tabletop.TCP]
            if row[tabletop.GAP] > FINGERS_CLOSED_GAP:
                out.append(Skill("grasp"))
                continue
            target, _, pushing = self._waypoint(tcp, row[cube.CUBE_POS], row[tabletop.GOAL], written=True)
            out.append(Skill("push", _cm(target[:2] - tcp[:2])) if pushing else _move_to(target))
        return out

    def _waypoint(
        self, tcp: np.ndarray, box: np.ndarray, goal: np.ndarray, written: bool = False
    ) -> tuple[np.ndarray, float, bool]:
        """Where the TCP goes next for one row, at which speed, and whether that is a push.

        ``written``: for a skill, which runs open loop: pushes reach ``skill_push`` ahead, and
        flights always pass over the cube (a straight low flight may cross it).
        """
        to_goal = goal[:2] - box[:2]
        distance = float(np.linalg.norm(to_goal))
        u = to_goal / max(distance, 1e-9)
        n = np.array([-u[1], u[0]])
        rel = tcp[:2] - box[:2]
        along, lateral = float(rel @ u), float(rel @ n)
        contact = box[:2] - u * (cube.CUBE_HALF + PAD_REACH)
        low = tcp[2] < self.push_height + 0.012
        if low and along < -cube.CUBE_HALF and abs(lateral) < self.lateral_tolerance:
            # push, steering back onto the line
            ahead = contact + u * min(self.skill_push if written else self.push_step, distance)
            return np.array([*ahead, self.push_height]), 0.6, True
        near = np.all(np.abs(rel) < cube.CUBE_HALF + PAD_REACH + self.clearance)
        if tcp[2] < SAFE_HEIGHT - 0.02 and near:
            return np.array([*(tcp[:2] - u * 0.01), SAFE_HEIGHT]), 1.0, False  # lift clear
        start = contact - u * self.standoff
        if np.linalg.norm(tcp[:2] - start) > 0.008:  # fly to the start, over the cube when near it
            far_and_low = not written and np.linalg.norm(rel) > 0.12 and tcp[2] < self.push_height + 0.02
            return np.array([*start, tcp[2] if far_and_low else SAFE_HEIGHT]), 1.0, False
        return np.array([*start, self.push_height]), 1.0, False  # descend behind the cube


class PushCubeTwoStageExpert(PushCubeExpert):
    """PushCube's pushes: to the blue marker until the cube has been there, then to the red target.

    The observation does not say whether the cube has been at the marker, so the expert remembers
    it per row, from the observations it acted on (the env's rule: the cube's centre within
    ``success_distance`` of the marker); ``reset(done_mask)`` forgets it for finished episodes.
    """

    name: ClassVar[str] = "pushcube_two_stage_expert"
    config_class: ClassVar[type[PolicyConfig]] = PushCubeTwoStageExpertConfig
    state_dim: ClassVar[int] = two_stage.TWO_STAGE_STATE_DIM
    clearance: ClassVar[float] = 0.03
    """Wider than PushCube's: at the marker the push turns, and the TCP is then still right behind
    the cube for the old direction."""

    def __init__(
        self, config: ExpertConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self._reached = np.zeros(0, dtype=bool)

    def actions(self, state: np.ndarray) -> np.ndarray:
        """PushCube's actions towards each row's current target."""
        return super().actions(self._current_task(state))

    def skills(self, state: np.ndarray) -> list[Skill]:
        """PushCube's skills towards each row's current target."""
        return super().skills(self._current_task(state))

    def _current_task(self, state: np.ndarray) -> np.ndarray:
        """PushCube states ``[B, 23]`` whose goal is each row's current target (marker or red target)."""
        if len(self._reached) != len(state):
            self._reached = np.zeros(len(state), dtype=bool)
        offset = state[:, cube.CUBE_POS] - state[:, two_stage.WAYPOINT]
        self._reached |= np.linalg.norm(offset, axis=1) < two_stage.REACHED_DISTANCE
        out = state[:, : cube.STATE_DIM].copy()
        out[~self._reached, tabletop.GOAL] = state[~self._reached, two_stage.WAYPOINT]
        return out

    def reset(self, done_mask: torch.Tensor | None = None) -> None:
        """Forget whether the cube has been at the marker, for rows where ``done_mask`` (all: None)."""
        if done_mask is None:
            self._reached = np.zeros(0, dtype=bool)
            return
        done = np.asarray(done_mask.cpu(), dtype=bool).reshape(-1)
        if done.shape == self._reached.shape:
            self._reached[done] = False
        else:
            self._reached = np.zeros(0, dtype=bool)


class PickPlaceExpert(ScriptedExpert):
    """Above the cube with open fingers, down, close, then carry the cube to the goal.

    Written skills: ``release`` when the fingers are not open and hold nothing, ``move_to`` above
    the cube, ``move_to`` the cube, ``grasp``, ``move_to`` where the cube is at the goal.
    """

    name: ClassVar[str] = "pickplace_expert"
    config_class: ClassVar[type[PolicyConfig]] = PickPlaceExpertConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Text)
    state_dim: ClassVar[int] = cube.STATE_DIM
    action_dim: ClassVar[int] = 4
    grasp_gap: ClassVar[float] = 2 * cube.CUBE_HALF + 0.006
    """Pad gap below which closed fingers hold the cube (m)."""

    def actions(self, state: np.ndarray) -> np.ndarray:
        """One action per row, from where the TCP, the fingers and the cube are."""
        out = np.empty((len(state), 4))
        for i, row in enumerate(state):
            out[i] = self._action(
                row[tabletop.TCP], row[tabletop.GAP], row[cube.CUBE_POS], row[tabletop.GOAL]
            )
        return out

    def skills(self, state: np.ndarray) -> list[Skill]:
        """One skill per row, from the same phases as :meth:`actions`."""
        out = []
        for row in state:
            tcp, gap = row[tabletop.TCP], row[tabletop.GAP]
            phase, target = self._phase(tcp, gap, row[cube.CUBE_POS], row[tabletop.GOAL])
            if phase == "close":
                out.append(Skill("grasp"))
            elif phase != "carry" and gap < FINGERS_OPEN_GAP:
                out.append(Skill("release"))
            else:
                out.append(_move_to(target))
        return out

    def _phase(
        self, tcp: np.ndarray, gap: float, box: np.ndarray, goal: np.ndarray
    ) -> tuple[str, np.ndarray]:
        """The phase of one row (``carry``, ``close``, ``fly``, ``descend``) and its TCP target."""
        offset = box - tcp
        at_cube = np.linalg.norm(offset[:2]) < 0.01 and abs(offset[2]) < 0.012
        if at_cube and gap < self.grasp_gap:  # holding it: bring the cube to the goal
            return "carry", tcp + goal - box
        if at_cube:
            return "close", box  # close on it
        if np.linalg.norm(offset[:2]) > 0.008:  # fly over it with open fingers, the pads clear of it
            return "fly", np.array([box[0], box[1], box[2] + SAFE_HEIGHT - cube.CUBE_HALF])
        return "descend", box  # descend around it

    def _action(self, tcp: np.ndarray, gap: float, box: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """The action for one row."""
        phase, target = self._phase(tcp, gap, box, goal)
        speed = {"carry": 0.6, "close": 1.0, "fly": 1.0, "descend": 0.8}[phase]
        grip = GRIP_CLOSED if phase in ("carry", "close") else GRIP_OPEN
        return np.array([*move_action(tcp, target, speed), grip])


# --- PushT ----------------------------------------------------------------------------------------
class PushTExpert(ScriptedExpert):
    """Pushes the T with a quasi-static contact planner (``pushing.PushPlanner``).

    Keeps one planner per batch row (a push in progress is finished before another is chosen);
    ``reset(done_mask)`` clears the rows whose episode ended.
    """

    name: ClassVar[str] = "pusht_expert"
    config_class: ClassVar[type[PolicyConfig]] = PushTExpertConfig
    state_dim: ClassVar[int] = pusht.STATE_DIM
    action_dim: ClassVar[int] = 2

    def __init__(
        self, config: ExpertConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self._planners: list[PushPlanner] = []

    def reset(self, done_mask: torch.Tensor | None = None) -> None:
        """Forget the pushes in progress (of the rows where ``done_mask``; all when None)."""
        if done_mask is None:
            self._planners = []
            return
        for i in torch.as_tensor(done_mask).nonzero().flatten().tolist():
            if i < len(self._planners):
                self._planners[i] = self._new_planner()

    def _new_planner(self) -> PushPlanner:
        """The planner of one batch row's episode."""
        return PushPlanner()

    def actions(self, state: np.ndarray) -> np.ndarray:
        """Each row's planner target, as the task's action."""
        while len(self._planners) < len(state):
            self._planners.append(self._new_planner())
        rows = zip(self._planners, state, strict=False)
        return np.array([self._action(planner, row) for planner, row in rows])

    def _action(self, planner: PushPlanner, state: np.ndarray) -> np.ndarray:
        """The absolute pusher action to the planner's target for one state row."""
        return np.clip(planner.target(state) / pusht.WORKSPACE, -1.0, 1.0)


class GymPushTExpert(PushTExpert):
    """``pusht_expert``'s planner on LeRobot's gym-pusht (``omnigym/GymPushT-v0`` and its pixels twin).

    Reads the privileged ``expert_state`` (the env adds it when made with
    ``privileged=["expert_state"]``; ``omnigym eval`` and ``collect`` do so), converts it to the
    MuJoCo port's frame (``gym_pusht.planner_state``), plans with the block's own inertia ratio
    (``gym_pusht.BLOCK_RHO2``), and asks gym-pusht's PD controller for the command that puts the
    agent on the planner's target by the end of the step (``gym_pusht.action_to_reach``).
    """

    name: ClassVar[str] = "gym_pusht_expert"
    config_class: ClassVar[type[PolicyConfig]] = GymPushTExpertConfig
    state_dim: ClassVar[int] = gym_pusht.EXPERT_STATE_DIM
    state_key: ClassVar[str] = gym_pusht.EXPERT_STATE
    env_kwargs: ClassVar[dict[str, Any]] = {"privileged": [gym_pusht.EXPERT_STATE]}

    def _new_planner(self) -> PushPlanner:
        """A planner with gym-pusht's block inertia ratio."""
        return PushPlanner(rho2=gym_pusht.BLOCK_RHO2)

    def _action(self, planner: PushPlanner, state: np.ndarray) -> np.ndarray:
        """The command that puts the agent on the planner's target (pixels) by the end of the step."""
        target = gym_pusht.CENTRE_PX + gym_pusht.PX_PER_M * planner.target(gym_pusht.planner_state(state))
        return gym_pusht.action_to_reach(target, state[0:2], state[2:4])
