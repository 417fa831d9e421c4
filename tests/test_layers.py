"""The rooms' import rules: the import-linter contracts of pyproject.toml, and no import circle across rooms.

Rooms: ``omnigym.core`` (the ground floor), ``omnigym.envs``, ``omnigym.policies``,
``omnigym.world_models`` and ``omnigym.platform`` (docs/architecture.md, "Layout"). The graph is
grimp's, which counts imports inside functions too. :func:`layer_violations` checks any graph, so
the last tests can show that it reports each crossing the code once had.
"""

from __future__ import annotations

import ast
import copy
import functools
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.api import read_configuration
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.independence import IndependenceContract
from importlinter.contracts.layers import LayersContract

import omnigym
from omnigym.core.registry import ENV_BACKENDS

PACKAGE_DIR = Path(omnigym.__file__).resolve().parent
PYPROJECT = PACKAGE_DIR.parent / "pyproject.toml"
ROOMS = ("omnigym.core", "omnigym.envs", "omnigym.policies", "omnigym.world_models", "omnigym.platform")
CONTRACT_TYPES: dict[str, Any] = {
    "forbidden": ForbiddenContract,
    "independence": IndependenceContract,
    "layers": LayersContract,
}


@functools.cache
def omnigym_graph() -> grimp.ImportGraph:
    """omnigym's import graph (modules of omnigym only), built once per session."""
    return grimp.build_graph("omnigym", cache_dir=None)


@functools.cache
def contracts() -> tuple[dict[str, Any], tuple[dict[str, Any], ...]]:
    """The session options and the contracts of ``[tool.importlinter]`` in pyproject.toml."""
    config = read_configuration(str(PYPROJECT))
    return config["session_options"], tuple(config["contracts_options"])


def room(module: str) -> str:
    """The room a module belongs to (``omnigym`` itself and ``omnigym.__main__`` are their own)."""
    return ".".join(module.split(".")[:2])


def broken_contracts(graph: grimp.ImportGraph) -> list[str]:
    """The ids of the pyproject.toml contracts that ``graph`` breaks."""
    session_options, contract_options = contracts()
    broken = []
    for options in contract_options:
        contract = CONTRACT_TYPES[options["type"]](
            name=options["name"], session_options=session_options, contract_options=options
        )
        if not contract.check(copy.deepcopy(graph), verbose=False).kept:
            broken.append(options["id"])
    return broken


def cross_room_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Import circles between files of different rooms: strongly connected components that span rooms.

    Tarjan's algorithm, iterative (a long import chain would exceed the recursion limit).
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            child = next(imported, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                components.append(sorted(component))
    return [c for c in components if len({room(m) for m in c}) > 1]


def layer_violations(graph: grimp.ImportGraph) -> list[str]:
    """Every broken rule of ``graph``: broken contracts by id, then the circles across rooms."""
    circles = [f"import circle across rooms: {' <-> '.join(c)}" for c in cross_room_cycles(graph)]
    return [*(f"contract {c!r}" for c in broken_contracts(graph)), *circles]


def test_the_rooms_keep_their_import_rules() -> None:
    assert layer_violations(omnigym_graph()) == []


def test_every_package_is_a_room_and_every_env_family_is_off_limits_to_vec_env() -> None:
    graph = omnigym_graph()
    top = {m for m in graph.find_children("omnigym") if m != "omnigym.__main__"}
    assert top == set(ROOMS), "a new top-level package: give it a room and contracts in pyproject.toml"
    families = {m for m in graph.find_children("omnigym.envs") if graph.find_children(m)}
    (vec_env,) = [c for c in contracts()[1] if c["id"] == "vec-env"]
    assert families <= set(vec_env["forbidden_modules"]), "list the new env family in the vec-env contract"


def test_every_env_backend_names_a_function() -> None:
    """The registry strings in place of imports across rooms name existing functions (read, not imported)."""
    graph = omnigym_graph()
    assert {"real", "real_vector", "isaaclab", "world_model", "learned_traffic"} <= set(ENV_BACKENDS.names())
    for name in ENV_BACKENDS.names():
        module, _, function = str(ENV_BACKENDS.target(name)).partition(":")
        assert module in graph.modules, f"env backend {name!r}: no module {module}"
        path = PACKAGE_DIR.parent / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert function in defined, f"env backend {name!r}: {module} defines no function {function}"


# The crossings of the code before the ground floor (omnigym.core) existed: each must be reported.
HISTORICAL_CROSSINGS = {
    # vec_env imported the Isaac Lab adapter and the world-model env, which imported vec_env (and
    # the datasets) back
    "vec_env imports the Isaac Lab adapter": (
        [("omnigym.platform.vec_env", "omnigym.envs.manipulation.isaaclab")],
        {"contract 'vec-env'"},
    ),
    "vec_env imports world_models.env": (
        [("omnigym.platform.vec_env", "omnigym.world_models.env")],
        {"contract 'vec-env'", "import circle across rooms"},
    ),
    # the Isaac Lab adapter imported the platform's TorchVectorEnv
    "isaaclab imports platform.vec_env": (
        [("omnigym.envs.manipulation.isaaclab", "omnigym.platform.vec_env")],
        {"contract 'envs-policies'"},
    ),
    # the VLM policy parsed text actions with the envs' module
    "vlm policy imports envs.text_actions": (
        [("omnigym.policies.vlm.policy", "omnigym.envs.text_actions")],
        {"contract 'envs-policies-independent'"},
    ),
}


@pytest.mark.parametrize("crossing", list(HISTORICAL_CROSSINGS))
def test_the_checks_report_each_historical_crossing(crossing: str) -> None:
    imports, expected = HISTORICAL_CROSSINGS[crossing]
    graph = copy.deepcopy(omnigym_graph())
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    reported = {v.split(":")[0] for v in layer_violations(graph)}
    assert expected <= reported, reported


def test_a_circle_across_rooms_is_reported_by_its_modules() -> None:
    graph = copy.deepcopy(omnigym_graph())
    graph.add_import(importer="omnigym.platform.vec_env", imported="omnigym.world_models.env")
    (circle,) = cross_room_cycles(graph)
    assert {"omnigym.platform.vec_env", "omnigym.world_models.env"} <= set(circle)
