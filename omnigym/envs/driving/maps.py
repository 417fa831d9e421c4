"""Procedural road maps, and the lane (Frenet) geometry the traffic simulator drives on.

Four builders draw a map from a ``np.random.Generator``: a straight road, a curved road (clothoid
transitions, possibly an S-curve), a highway on-ramp merge and a signalised 4-way intersection.
Each returns a :class:`ProceduralMap`: the :class:`RoadMap` plus the ego routes the scene
generator may pick. Lanes of a road block are offsets of one reference line, so neighbouring lanes
span the same cross-sections (the simulator maps stations between them by length ratio). Traffic
drives on the right; lane 0 of a block is its leftmost lane. Every map is centred on the origin,
randomly rotated, and fits a circle of :data:`FIT_RADIUS`, so it fits the raster canvas at any angle.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from omnigym.envs.driving.scene import COMMAND_LEFT, COMMAND_RIGHT, COMMAND_STRAIGHT, RoadMap

POINT_SPACING = 1.0
"""Metres between centreline points."""
FIT_RADIUS = 188.0
"""Every centreline point lies within this distance of the origin (the 400 m canvas, less its margin)."""
LATERAL_ACCEL = 2.5
"""m/s², the comfortable lateral acceleration that caps speed limits on curves and turns."""


@dataclass
class RouteOption:
    """A route the ego can be given: lanes in driving order and the navigation command."""

    lanes: np.ndarray  # [R] int32
    command: int
    name: str  # e.g. "lane 1", "ramp", "arm 2 left"


@dataclass
class ProceduralMap:
    """A built map: the road map, candidate ego routes, and how its traffic lights are phased."""

    kind: str
    road_map: RoadMap
    routes: list[RouteOption]
    light_group: np.ndarray  # [K] int32 approach (signal phase) of each light
    num_light_groups: int


# --- building blocks -------------------------------------------------------------------------------
class _Builder:
    """Accumulates lanes, links and lights, then rotates, centres and pads them into a RoadMap."""

    def __init__(self) -> None:
        self.points: list[np.ndarray] = []
        self.width: list[float] = []
        self.speed: list[float] = []
        self.connector: list[bool] = []
        self.road: list[int] = []
        self.left: dict[int, int] = {}
        self.right: dict[int, int] = {}
        self.successors: dict[int, list[int]] = {}
        self.quads: list[np.ndarray] = []
        self.lights: list[tuple[int, int]] = []
        self.num_roads = 0

    def lane(self, points: np.ndarray, width: float, speed: float, road: int, connector: bool = False) -> int:
        """Add a lane along ``points`` (resampled every POINT_SPACING m); returns its id."""
        self.points.append(_resample(points))
        self.width.append(width)
        self.speed.append(speed)
        self.connector.append(connector)
        self.road.append(road)
        return len(self.points) - 1

    def block(self, polylines: list[np.ndarray], width: float, speed: float) -> list[int]:
        """A road block: ``polylines`` ordered left to right become same-direction neighbours."""
        road, self.num_roads = self.num_roads, self.num_roads + 1
        lanes = [self.lane(p, width, speed, road) for p in polylines]
        for a, b in itertools.pairwise(lanes):
            self.right[a], self.left[b] = b, a
        return lanes

    def link(self, lane: int, successor: int) -> None:
        """Make ``successor`` follow ``lane``."""
        self.successors.setdefault(lane, []).append(successor)

    def finish(self, rng: np.random.Generator) -> tuple[RoadMap, np.ndarray]:
        """The RoadMap, centred on the origin and rotated by a random angle; also the lights' groups."""
        low = np.min([p.min(axis=0) for p in self.points], axis=0)
        high = np.max([p.max(axis=0) for p in self.points], axis=0)
        angle = rng.uniform(0.0, 2 * np.pi)
        rotation = np.array([[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]])
        centre = (low + high) / 2

        def place(p: np.ndarray) -> np.ndarray:
            return (p - centre) @ rotation

        lanes = [place(p) for p in self.points]
        num_points = np.array([len(p) for p in lanes], np.int32)
        padded = np.stack(
            [np.concatenate([p, np.repeat(p[-1:], num_points.max() - len(p), 0)]) for p in lanes]
        )
        num_lanes = len(lanes)
        num_succ = max([len(s) for s in self.successors.values()], default=1)
        successors = np.full((num_lanes, num_succ), -1, np.int32)
        for lane, succ in self.successors.items():
            successors[lane, : len(succ)] = succ
        road_map = RoadMap(
            lane_points=padded.astype(np.float32),
            lane_num_points=num_points,
            lane_width=np.array(self.width, np.float32),
            lane_speed_limit=np.array(self.speed, np.float32),
            lane_is_connector=np.array(self.connector, bool),
            lane_road=np.array(self.road, np.int32),
            lane_left=np.array([self.left.get(i, -1) for i in range(num_lanes)], np.int32),
            lane_right=np.array([self.right.get(i, -1) for i in range(num_lanes)], np.int32),
            lane_successors=successors,
            intersections=np.array([place(q) for q in self.quads], np.float32).reshape(-1, 4, 2),
            light_lane=np.array([lane for lane, _ in self.lights], np.int32),
        )
        return road_map, np.array([group for _, group in self.lights], np.int32)


def _resample(points: np.ndarray) -> np.ndarray:
    seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
    keep = np.concatenate([[True], seg > 1e-9])
    points, arc = points[keep], np.concatenate([[0.0], np.cumsum(seg[seg > 1e-9])])
    count = max(int(np.ceil(arc[-1] / POINT_SPACING)), 1) + 1
    stations = np.linspace(0.0, arc[-1], count)
    return np.stack([np.interp(stations, arc, points[:, 0]), np.interp(stations, arc, points[:, 1])], axis=1)


def _offset(reference: np.ndarray, offset: float) -> np.ndarray:
    """The polyline ``offset`` metres left of ``reference`` (negative: right)."""
    tangent = np.gradient(reference, axis=0)
    tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
    return reference + offset * np.stack([-tangent[:, 1], tangent[:, 0]], axis=1)


def _integrate(start: np.ndarray, heading: float, curvature: np.ndarray, step: float) -> np.ndarray:
    """Points of the curve that starts at ``start`` with ``heading`` and has ``curvature`` per step."""
    theta = heading + np.concatenate([[0.0], np.cumsum(curvature * step)])
    mid = (theta[1:] + theta[:-1]) / 2  # midpoint rule keeps arcs accurate
    steps = np.stack([np.cos(mid), np.sin(mid)], axis=1) * step
    return start + np.concatenate([np.zeros((1, 2)), np.cumsum(steps, axis=0)])


def _clothoid_line(pieces: list[tuple[float, float, float]], step: float = 0.5) -> np.ndarray:
    """A reference line from (length, start curvature, end curvature) pieces, linear in between."""
    curvature = np.concatenate(
        [np.linspace(k0, k1, max(int(length / step), 1), endpoint=False) for length, k0, k1 in pieces]
    )
    return _integrate(np.zeros(2), 0.0, curvature, step)


def _smoothstep(u: np.ndarray) -> np.ndarray:
    return u * u * (3 - 2 * u)


def _turn(p0: np.ndarray, h0: float, p1: np.ndarray, h1: float) -> np.ndarray:
    """A connector from ``p0`` (heading ``h0``) to ``p1`` (heading ``h1``).

    Turns are symmetric curves whose heading follows a smoothstep, so curvature is zero at both
    ends (no yaw-rate jump entering or leaving); straight legs absorb unequal distances to the corner.
    """
    d0, d1 = np.array([np.cos(h0), np.sin(h0)]), np.array([np.cos(h1), np.sin(h1)])
    delta = float(np.angle(np.exp(1j * (h1 - h0))))
    if abs(delta) < 1e-3:
        return np.stack([p0, p1])
    leg_in, leg_out = np.linalg.solve(np.stack([d0, d1], axis=1), p1 - p0)  # corner: p0 + a d0 = p1 - b d1
    leg = min(leg_in, leg_out)
    u = np.linspace(0.0, 1.0, 201)
    unit = _integrate(np.zeros(2), 0.0, np.diff(delta * _smoothstep(u)) / 0.005, 0.005)[-1]
    length = leg / (unit[0] - unit[1] / np.tan(delta))  # legs of the unit-length symmetric turn
    start = p0 + (leg_in - leg) * d0
    curve = _integrate(start, h0, np.diff(delta * _smoothstep(u)) / (length / 200), length / 200)
    return np.concatenate([p0[None], curve, p1[None]])


def _fits(builder: _Builder) -> bool:
    points = np.concatenate(builder.points)
    centre = (points.min(axis=0) + points.max(axis=0)) / 2
    return bool(np.linalg.norm(points - centre, axis=1).max() <= FIT_RADIUS)


def _speed_on(reference_lines: list[np.ndarray], speed: float) -> float:
    """``speed`` capped so that the tightest curve of the given lines is comfortable."""
    curvature = 0.0
    for line in reference_lines:
        heading = np.unwrap(np.arctan2(*np.diff(line, axis=0).T[::-1]))
        seg = np.linalg.norm(np.diff(line, axis=0), axis=1)
        if len(heading) > 1:
            curvature = max(curvature, float(np.max(np.abs(np.diff(heading)) / seg[1:])))
    return speed if curvature < 1e-6 else min(speed, float(np.sqrt(LATERAL_ACCEL / curvature)))


def _two_way_road(
    rng: np.random.Generator, reference: np.ndarray, speed: float
) -> tuple[_Builder, list[RouteOption]]:
    """2-4 lanes along ``reference`` (on its right) and 1-3 oncoming lanes on its left."""
    builder = _Builder()
    forward, oncoming = int(rng.integers(2, 5)), int(rng.integers(1, 4))
    width = rng.uniform(3.5, 3.75)
    ahead = [_offset(reference, -(i + 0.5) * width) for i in range(forward)]
    back = [_offset(reference, (j + 0.5) * width)[::-1] for j in range(oncoming)]
    speed = _speed_on(ahead + back, speed)
    lanes = builder.block(ahead, width, speed)
    builder.block(back, width, speed)
    return builder, [
        RouteOption(np.array([lane], np.int32), COMMAND_STRAIGHT, f"lane {i}") for i, lane in enumerate(lanes)
    ]


# --- builders --------------------------------------------------------------------------------------
def _first_fit(
    kind: str, rng: np.random.Generator, draw: Callable[[], tuple[_Builder, list[RouteOption]]]
) -> ProceduralMap:
    """The first of up to 100 drawn maps that fits the canvas, rotated and centred."""
    for _ in range(100):
        builder, routes = draw()
        if _fits(builder):
            road_map, groups = builder.finish(rng)
            return ProceduralMap(kind, road_map, routes, groups, 0)
    raise RuntimeError(f"could not draw a {kind} map that fits the canvas")  # pragma: no cover


def build_straight(rng: np.random.Generator) -> ProceduralMap:
    """A straight road, 320-370 m: 2-4 lanes in the ego direction and 1-3 oncoming lanes."""
    length = rng.uniform(320.0, 370.0)
    return _first_fit(
        "straight",
        rng,
        lambda: _two_way_road(rng, np.array([[0.0, 0.0], [length, 0.0]]), rng.uniform(12.5, 16.7)),
    )


def build_curve(rng: np.random.Generator) -> ProceduralMap:
    """A curved road, 340-440 m: one arc (radius 80-300 m) or an S-curve, with clothoid transitions."""
    return _curved_road("curve", rng, (80.0, 300.0))


def build_sharp_curve(rng: np.random.Generator) -> ProceduralMap:
    """A curved road with tight arcs (radius 50-90 m): the hard split's curves.

    Keeping the heading there leaves the road in seconds; speed limits are capped for comfort as on
    every curve.
    """
    return _curved_road("sharp_curve", rng, (50.0, 90.0))


def _curved_road(kind: str, rng: np.random.Generator, radii: tuple[float, float]) -> ProceduralMap:
    """340-440 m of road: one arc or an S-curve with radii drawn in ``radii``, clothoid transitions."""

    def draw() -> tuple[_Builder, list[RouteOption]]:
        arcs: list[tuple[float, float, float]] = []
        sign = rng.choice([-1.0, 1.0])
        for _ in range(1 + int(rng.random() < 0.5)):
            radius, ramp = rng.uniform(*radii), rng.uniform(20.0, 40.0)
            arc = max(min(rng.uniform(60.0, 180.0), radius * np.pi / 2 - ramp), 10.0)
            arcs += [
                (ramp, 0.0, sign / radius),
                (arc, sign / radius, sign / radius),
                (ramp, sign / radius, 0.0),
            ]
            sign = -sign
        straight = max(rng.uniform(340.0, 440.0) - sum(p[0] for p in arcs), 60.0)
        lead_in = straight * rng.uniform(0.3, 0.7)
        pieces = [(lead_in, 0.0, 0.0), *arcs, (straight - lead_in, 0.0, 0.0)]
        return _two_way_road(rng, _clothoid_line(pieces), rng.uniform(13.9, 16.7))

    return _first_fit(kind, rng, draw)


def _along_x(x_from: float, x_to: float, y: float) -> np.ndarray:
    return np.array([[x_from, y], [x_to, y]])


def build_merge(rng: np.random.Generator) -> ProceduralMap:
    """A 2-3 lane main road (with 2-3 oncoming lanes) and an on-ramp joining from the right.

    Over the merge section the ramp lane runs beside the rightmost main lane (its ``lane_left``),
    then tapers into it: its successor is the downstream main lane, and the simulator treats the
    taper as a lane end that agents must leave by changing lanes.
    """

    def draw() -> tuple[_Builder, list[RouteOption]]:
        builder = _Builder()
        lanes, oncoming, width = int(rng.integers(2, 4)), int(rng.integers(2, 4)), rng.uniform(3.5, 3.75)
        speed = rng.uniform(13.9, 16.7)
        total, x1 = rng.uniform(340.0, 370.0), rng.uniform(90.0, 120.0)  # merge section from x1 to x2
        parallel, taper = rng.uniform(90.0, 130.0), rng.uniform(40.0, 50.0)
        x2 = x1 + parallel + taper
        y = [-(i + 0.5) * width for i in range(lanes + 1)]  # main lanes, then the ramp lane
        builder.block([_along_x(total, 0.0, (j + 0.5) * width) for j in range(oncoming)], width, speed)
        up = builder.block([_along_x(0.0, x1, y[i]) for i in range(lanes)], width, speed)
        u = np.linspace(0.0, 1.0, int(taper) + 1)[:, None]
        tapering = np.hstack([x1 + parallel + u * taper, y[lanes] + width * _smoothstep(u)])
        merge_lane = np.concatenate([_along_x(x1, x1, y[lanes])[:1], tapering])
        section = builder.block([_along_x(x1, x2, y[i]) for i in range(lanes)] + [merge_lane], width, speed)
        down = builder.block([_along_x(x2, total, y[i]) for i in range(lanes)], width, speed)
        # the ramp: a straight at 15-30 degrees, then a smooth turn onto the main road's heading
        angle, bend, lead = rng.uniform(0.26, 0.52), rng.uniform(40.0, 60.0), rng.uniform(50.0, 70.0)
        kappa = -2 * angle / bend
        approach = _clothoid_line([(lead, 0.0, 0.0), (bend / 2, 0.0, kappa), (bend / 2, kappa, 0.0)])
        approach = approach @ np.array([[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]])
        ramp = builder.block([approach + np.array([x1, y[lanes]]) - approach[-1]], width, speed)[0]
        for i in range(lanes):
            builder.link(up[i], section[i])
            builder.link(section[i], down[i])
        builder.link(ramp, section[-1])
        builder.link(section[-1], down[-1])
        routes = [
            RouteOption(np.array([up[i], section[i], down[i]], np.int32), COMMAND_STRAIGHT, f"main lane {i}")
            for i in range(lanes)
        ]
        routes.append(
            RouteOption(np.array([ramp, section[-1], down[-1]], np.int32), COMMAND_STRAIGHT, "ramp")
        )
        return builder, routes

    return _first_fit("merge", rng, draw)


def build_intersection(rng: np.random.Generator) -> ProceduralMap:
    """A signalised 4-way intersection: arms of 125-160 m with 1-2 lanes per direction, limit 11-14 m/s.

    With one lane per direction it serves left, straight and right; with two, the left lane turns
    left or goes straight and the right lane goes straight or turns right. Every connector has a
    traffic light; lights of one approach form one signal group (phase).
    """
    builder = _Builder()
    lanes, width = int(rng.integers(1, 3)), float(rng.uniform(3.5, 3.75))
    speed = float(rng.uniform(11.1, 13.9))
    half = lanes * width + rng.uniform(8.0, 11.0)  # half-size of the junction box
    incoming, outgoing, axes = [], [], []
    for arm in range(4):
        u = np.array([np.cos(arm * np.pi / 2), np.sin(arm * np.pi / 2)])
        n = np.array([-u[1], u[0]])
        length = rng.uniform(125.0, 160.0)
        inner, outer = u * half, u * (half + length)
        incoming.append(
            builder.block(
                [np.stack([outer, inner]) + (i + 0.5) * width * n for i in range(lanes)], width, speed
            )
        )
        outgoing.append(
            builder.block(
                [np.stack([inner, outer]) - (i + 0.5) * width * n for i in range(lanes)], width, speed
            )
        )
        axes.append(arm * np.pi / 2)
    moves = {0: [(COMMAND_LEFT, 0), (COMMAND_STRAIGHT, 0)], 1: [(COMMAND_STRAIGHT, 1), (COMMAND_RIGHT, 1)]}
    if lanes == 1:
        moves = {0: [(COMMAND_LEFT, 0), (COMMAND_STRAIGHT, 0), (COMMAND_RIGHT, 0)]}
    exit_arm = {COMMAND_LEFT: 3, COMMAND_STRAIGHT: 2, COMMAND_RIGHT: 1}
    names = {COMMAND_LEFT: "left", COMMAND_STRAIGHT: "straight", COMMAND_RIGHT: "right"}
    routes, connector_road = [], builder.num_roads
    builder.num_roads += 1
    for arm in range(4):
        for lane_index, lane_moves in moves.items():
            src = incoming[arm][lane_index]
            for command, out_index in lane_moves:
                dst = outgoing[(arm + exit_arm[command]) % 4][out_index]
                h0, h1 = axes[arm] + np.pi, axes[(arm + exit_arm[command]) % 4]
                curve = _turn(builder.points[src][-1], h0, builder.points[dst][0], h1)
                limit = _speed_on([_resample(curve)], speed)
                conn = builder.lane(curve, width, limit, connector_road, connector=True)
                builder.link(src, conn)
                builder.link(conn, dst)
                builder.lights.append((conn, arm))
                routes.append(
                    RouteOption(np.array([src, conn, dst], np.int32), command, f"arm {arm} {names[command]}")
                )
    builder.quads.append(np.array([[half, half], [-half, half], [-half, -half], [half, -half]]))
    road_map, groups = builder.finish(rng)
    return ProceduralMap("intersection", road_map, routes, groups, 4)


BUILDERS: dict[str, Callable[[np.random.Generator], ProceduralMap]] = {
    "straight": build_straight,
    "curve": build_curve,
    "merge": build_merge,
    "intersection": build_intersection,
    "sharp_curve": build_sharp_curve,
}
"""Map kind -> builder."""
DEFAULT_KINDS = ("straight", "curve", "merge", "intersection")
"""The kinds procedural scenes draw by default (``sharp_curve`` is the hard split's)."""


# --- lane geometry -------------------------------------------------------------------------------
@dataclass
class LaneGeometry:
    """Arc-length tables of a map's lanes, to turn Frenet coordinates into world poses.

    All lanes' points are concatenated; lane ``l`` covers global arc ``base[l] .. base[l] +
    length[l]``, so one ``searchsorted`` serves a batch of agents on different lanes.
    """

    length: np.ndarray  # [L] lane lengths
    base: np.ndarray  # [L] global arc of each lane's first point
    first: np.ndarray  # [L] index of each lane's first point in the flat tables
    last: np.ndarray  # [L] index of each lane's last point
    arc: np.ndarray  # [N] global arc of every point
    xy: np.ndarray  # [N, 2]
    heading: np.ndarray  # [N] tangent heading, unwrapped along each lane

    @classmethod
    def of(cls, road_map: RoadMap) -> LaneGeometry:
        """Tables for every lane of ``road_map``."""
        xys, arcs, headings, lengths = [], [], [], []
        for lane in range(road_map.num_lanes):
            points = road_map.centreline(lane).astype(np.float64)
            seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
            tangent = np.gradient(points, axis=0)
            xys.append(points)
            arcs.append(np.concatenate([[0.0], np.cumsum(seg)]))
            headings.append(np.unwrap(np.arctan2(tangent[:, 1], tangent[:, 0])))
            lengths.append(arcs[-1][-1])
        length = np.array(lengths)
        counts = np.array([len(a) for a in arcs])
        base = np.concatenate([[0.0], np.cumsum(length + 1.0)[:-1]])  # 1 m gaps keep lanes apart
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return cls(
            length=length,
            base=base,
            first=first,
            last=first + counts - 1,
            arc=np.concatenate([a + b for a, b in zip(arcs, base, strict=True)]),
            xy=np.concatenate(xys),
            heading=np.concatenate(headings),
        )

    def pose(self, lane: np.ndarray, station: np.ndarray, lateral: np.ndarray | float = 0.0) -> np.ndarray:
        """World ``(x, y, heading)`` ``[..., 3]`` of Frenet points (broadcast shapes ``[...]``).

        A point lies ``lateral`` metres left of lane ``lane`` at ``station`` metres from its start
        (clipped to the lane); the heading is the lane's tangent there.
        """
        lane = np.asarray(lane)
        station = np.clip(station, 0.0, self.length[lane])
        index = np.searchsorted(self.arc, self.base[lane] + station, side="right") - 1
        index = np.clip(index, self.first[lane], self.last[lane] - 1)
        frac = (self.base[lane] + station - self.arc[index]) / np.maximum(
            self.arc[index + 1] - self.arc[index], 1e-9
        )
        frac = frac[..., None]
        xy = self.xy[index] * (1 - frac) + self.xy[index + 1] * frac
        heading = self.heading[index] * (1 - frac[..., 0]) + self.heading[index + 1] * frac[..., 0]
        normal = np.stack([-np.sin(heading), np.cos(heading)], axis=-1)
        xy = xy + np.asarray(lateral)[..., None] * normal
        return np.concatenate([xy, heading[..., None]], axis=-1)
