"""Tests for omnigym.core.config: strict dataclass building and YAML composition."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import pytest
import yaml

from omnigym.core.config import (
    ConfigError,
    apply_overrides,
    build_dataclass,
    compose,
    config_to_dict,
    list_options,
    load_yaml,
)


@dataclass
class OptimConfig:
    learning_rate: float = 3e-4
    betas: tuple[float, ...] = (0.9, 0.999)


@dataclass
class NetConfig:
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    activation: Literal["tanh", "relu"] = "tanh"


@dataclass
class AlgoConfig:
    type: str = "ppo"
    num_steps: int = 128
    gamma: float = 0.99


@dataclass
class PPOConfig(AlgoConfig):
    clip_coef: float = 0.2


@dataclass
class GRPOConfig(AlgoConfig):
    type: str = "grpo"
    group_size: int = 8


@dataclass
class RunConfig:
    name: str
    seed: int = 0
    total_steps: int = 1000
    deterministic: bool = False
    max_grad_norm: float | None = None
    weights: dict[str, float] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    net: NetConfig = field(default_factory=NetConfig)
    optim: Optional[OptimConfig] = None  # noqa: UP045 - the typing.Optional spelling is tested on purpose
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    extra: Any = None


@dataclass
class EnvsConfig:
    num_envs: int = 1

    def __post_init__(self) -> None:
        if self.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {self.num_envs}")


@dataclass
class EnvSection:
    id: str
    num_envs: int = 1
    max_episode_steps: int | None = None


@dataclass
class ExperimentConfig:
    env: EnvSection
    policy: dict[str, Any]
    algo: AlgoConfig
    runtime: dict[str, Any]
    seed: int = 0


ALGOS = {"ppo": PPOConfig, "grpo": GRPOConfig}


def resolve_algo(base: type, name: str, path: str) -> type:
    """A registry lookup, as the real caller does it."""
    assert base is AlgoConfig
    if name not in ALGOS:
        raise ConfigError(f"Unknown algorithm '{name}' at '{path}'. Registered: {', '.join(ALGOS)}.")
    return ALGOS[name]


def build_run(**data: Any) -> RunConfig:
    return build_dataclass(RunConfig, {"name": "test", **data})


# ---- build_dataclass: keys


def test_builds_with_defaults_and_given_values() -> None:
    config = build_run(seed=3, net={"hidden_sizes": [32], "activation": "relu"})
    assert config == RunConfig(name="test", seed=3, net=NetConfig(hidden_sizes=[32], activation="relu"))


def test_unknown_key_names_dotted_path_valid_keys_and_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        build_run(algo={"gama": 0.9})
    message = str(info.value)
    assert "'algo.gama'" in message
    assert "Did you mean 'gamma'?" in message
    assert "type, num_steps, gamma" in message


def test_unknown_top_level_key_without_close_match() -> None:
    with pytest.raises(ConfigError, match=r"Unknown config key 'zzz'\. Valid keys: name, seed") as info:
        build_run(zzz=1)
    assert "Did you mean" not in str(info.value)


def test_missing_required_key_names_path() -> None:
    with pytest.raises(ConfigError, match=r"Missing required config key 'name'"):
        build_dataclass(RunConfig, {})


def test_none_data_means_all_defaults() -> None:
    assert build_dataclass(NetConfig, None) == NetConfig()


def test_section_that_is_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match=r"'net' must be a mapping of NetConfig fields; got 5 \(int\)"):
        build_run(net=5)


# ---- build_dataclass: types


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        ({"seed": "3"}, r"'seed' expects int; got '3' \(str\)"),
        ({"seed": True}, r"'seed' expects int; got True \(bool\)"),
        ({"total_steps": 1.5}, r"'total_steps' expects int; got 1.5 \(float\)"),
        ({"deterministic": 1}, r"'deterministic' expects bool; got 1 \(int\)"),
        ({"name": 5}, r"'name' expects str; got 5 \(int\)"),
        ({"net": {"hidden_sizes": [64, "x"]}}, r"'net.hidden_sizes\[1\]' expects int; got 'x'"),
        ({"net": {"hidden_sizes": 64}}, r"'net.hidden_sizes' expects list\[int\]; got 64"),
        ({"max_grad_norm": "big"}, r"'max_grad_norm' expects float; got 'big'"),
        ({"weights": {"policy": "x"}}, r"'weights.policy' expects float"),
        (
            {"optim": {"learnin_rate": 1.0}},
            r"Unknown config key 'optim.learnin_rate'\. Did you mean 'learning_rate'\?",
        ),
        ({"optim": {"betas": 0.9}}, r"'optim.betas' expects tuple\[float, \.\.\.\]; got 0.9 \(float\)"),
    ],
)
def test_wrong_types_name_path_expected_type_and_value(data: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        build_run(**data)


def test_bad_literal_lists_choices() -> None:
    with pytest.raises(ConfigError) as info:
        build_run(net={"activation": "gelu"})
    assert str(info.value) == "Config key 'net.activation' must be one of 'tanh', 'relu'; got 'gelu' (str)."


def test_int_is_coerced_to_float() -> None:
    config = build_run(algo={"gamma": 1}, weights={"policy": 2})
    assert config.algo.gamma == 1.0 and type(config.algo.gamma) is float
    assert type(config.weights["policy"]) is float


def test_integral_float_is_accepted_for_int() -> None:
    config = build_run(total_steps=1e5)
    assert config.total_steps == 100_000 and type(config.total_steps) is int


def test_optional_fields() -> None:
    assert build_run(max_grad_norm=None).max_grad_norm is None
    assert build_run(max_grad_norm=1).max_grad_norm == 1.0
    assert build_run(optim=None).optim is None
    assert build_run(optim={"learning_rate": 1}).optim == OptimConfig(learning_rate=1.0)


def test_tuple_is_built_from_yaml_list() -> None:
    config = build_run(optim={"betas": [0.8, 1]})
    assert config.optim is not None
    assert config.optim.betas == (0.8, 1.0)
    assert isinstance(config.optim.betas, tuple)


def test_any_passes_through() -> None:
    assert build_run(extra={"a": [1, "b"]}, tags={"x": None}).extra == {"a": [1, "b"]}


def test_post_init_value_error_becomes_config_error() -> None:
    with pytest.raises(ConfigError, match=r"Invalid config 'EnvsConfig': num_envs must be >= 1, got 0"):
        build_dataclass(EnvsConfig, {"num_envs": 0})


# ---- build_dataclass: polymorphic sections


def test_resolver_picks_subclass_by_type() -> None:
    data = {"name": "x", "algo": {"type": "grpo", "group_size": 4, "gamma": 1}}
    config = build_dataclass(RunConfig, data, resolve_type=resolve_algo)
    assert config.algo == GRPOConfig(group_size=4, gamma=1.0)


def test_resolver_uses_base_default_type_when_section_has_none() -> None:
    config = build_dataclass(RunConfig, {"name": "x", "algo": {"clip_coef": 0.1}}, resolve_type=resolve_algo)
    assert config.algo == PPOConfig(clip_coef=0.1)


def test_resolver_is_called_with_base_name_and_path() -> None:
    calls = []

    def spy(base: type, name: str, path: str) -> type:
        calls.append((base, name, path))
        return resolve_algo(base, name, path)

    build_dataclass(ExperimentConfig, _experiment_data(algo={"type": "grpo"}), resolve_type=spy)
    assert calls == [(AlgoConfig, "grpo", "algo")]


def test_subclass_fields_are_unknown_without_resolver() -> None:
    with pytest.raises(ConfigError, match=r"Unknown config key 'algo.group_size'"):
        build_run(algo={"type": "grpo", "group_size": 4})


def test_unknown_type_error_from_resolver_propagates() -> None:
    with pytest.raises(ConfigError, match=r"Unknown algorithm 'sac' at 'algo'\. Registered: ppo, grpo"):
        build_dataclass(RunConfig, {"name": "x", "algo": {"type": "sac"}}, resolve_type=resolve_algo)


def test_non_string_type_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"'algo.type' expects str; got 3"):
        build_dataclass(RunConfig, {"name": "x", "algo": {"type": 3}}, resolve_type=resolve_algo)


# ---- config_to_dict


def test_config_to_dict_round_trip() -> None:
    data = {
        "name": "run",
        "seed": 7,
        "max_grad_norm": 0.5,
        "weights": {"policy": 1.0},
        "net": {"hidden_sizes": [8, 8], "activation": "relu"},
        "optim": {"learning_rate": 1e-3, "betas": [0.5, 0.6]},
        "algo": {"type": "grpo", "group_size": 2},
    }
    config = build_dataclass(RunConfig, data, resolve_type=resolve_algo)
    plain = config_to_dict(config)
    assert plain["optim"]["betas"] == [0.5, 0.6]
    assert plain["algo"] == {"type": "grpo", "num_steps": 128, "gamma": 0.99, "group_size": 2}
    assert json.loads(json.dumps(plain)) == plain
    assert yaml.safe_load(yaml.safe_dump(plain)) == plain
    assert build_dataclass(RunConfig, plain, resolve_type=resolve_algo) == config


def test_config_to_dict_rejects_non_dataclass() -> None:
    with pytest.raises(TypeError):
        config_to_dict({"a": 1})


# ---- YAML loading, overrides and composition


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    root = tmp_path / "configs"
    _write(root / "env/cartpole.yaml", "id: CartPole-v1\nnum_envs: 4\nmax_episode_steps: 500\n")
    _write(root / "env/pendulum.yaml", "id: Pendulum-v1\nnum_envs: 2\n")
    _write(root / "policy/mlp.yaml", "type: mlp\nhidden_sizes: [64, 64]\n")
    _write(root / "algo/ppo.yaml", "type: ppo\nnum_steps: 128\nclip_coef: 0.2\n")
    _write(root / "algo/grpo.yaml", "type: grpo\ngroup_size: 4\n")
    _write(root / "runtime/local.yaml", "device: cpu\nnum_workers: ${env.num_envs}\n")
    _write(
        root / "experiment/cartpole_ppo.yaml",
        "defaults: {env: cartpole, policy: mlp, algo: ppo, runtime: local}\nenv:\n  num_envs: 8\nseed: 1\n",
    )
    _write(root / "experiment/pendulum_grpo.yaml", "defaults: {env: pendulum, algo: grpo}\n")
    return root


def _experiment_data(**sections: Any) -> dict[str, Any]:
    data = {"env": {"id": "CartPole-v1"}, "policy": {}, "algo": {}, "runtime": {}}
    return {**data, **sections}


def test_compose_layers_defaults_and_experiment_keys(config_dir: Path) -> None:
    config = compose(config_dir, "cartpole_ppo")
    assert config == {
        "env": {"id": "CartPole-v1", "num_envs": 8, "max_episode_steps": 500},
        "policy": {"type": "mlp", "hidden_sizes": [64, 64]},
        "algo": {"type": "ppo", "num_steps": 128, "clip_coef": 0.2},
        "runtime": {"device": "cpu", "num_workers": 8},
        "seed": 1,
    }


def test_compose_dotted_overrides_win_and_interpolations_see_them(config_dir: Path) -> None:
    overrides = ["env.num_envs=16", "algo.clip_coef=1e-1", "seed=7", "policy.hidden_sizes=[32]"]
    config = compose(config_dir, "cartpole_ppo", overrides)
    assert config["env"] == {"id": "CartPole-v1", "num_envs": 16, "max_episode_steps": 500}
    assert config["algo"] == {"type": "ppo", "num_steps": 128, "clip_coef": 0.1}
    assert config["policy"]["hidden_sizes"] == [32]
    assert config["runtime"]["num_workers"] == 16  # resolved after composition
    assert config["seed"] == 7


def test_compose_group_swap_replaces_base_file_and_keeps_experiment_keys(config_dir: Path) -> None:
    config = compose(config_dir, "cartpole_ppo", ["env=pendulum", "algo=grpo"])
    assert config["env"] == {"id": "Pendulum-v1", "num_envs": 8}  # no max_episode_steps from cartpole
    assert config["algo"] == {"type": "grpo", "group_size": 4}
    swapped = compose(config_dir, "cartpole_ppo", ["env=pendulum", "env.num_envs=3"])
    assert swapped["env"] == {"id": "Pendulum-v1", "num_envs": 3}


def test_compose_group_swap_can_add_a_group(config_dir: Path) -> None:
    config = compose(config_dir, "pendulum_grpo", ["runtime=local"])
    assert config["runtime"] == {"device": "cpu", "num_workers": 2}
    assert "policy" not in config


def test_compose_unknown_group_option_lists_options(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"Unknown algo 'sac'\. Available in .*algo: grpo, ppo\."):
        compose(config_dir, "cartpole_ppo", ["algo=sac"])


def test_compose_unknown_group_in_defaults(config_dir: Path) -> None:
    _write(config_dir / "experiment/typo.yaml", "defaults: {enf: cartpole}\n")
    with pytest.raises(ConfigError, match=r"Unknown config group 'enf'.*Valid groups: env, policy"):
        compose(config_dir, "typo")


def test_compose_missing_experiment_lists_available(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"Unknown experiment 'nope'.*: cartpole_ppo, pendulum_grpo\."):
        compose(config_dir, "nope")


def test_compose_experiment_given_as_path(config_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    _write(path, "defaults: {env: cartpole}\nenv: {num_envs: 2}\n")
    assert compose(config_dir, path)["env"]["num_envs"] == 2
    assert compose(config_dir, str(path))["env"]["id"] == "CartPole-v1"
    with pytest.raises(ConfigError, match=r"Experiment file not found"):
        compose(config_dir, tmp_path / "missing.yaml")


def test_override_without_equals_sign_shows_the_right_form(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"Override 'env.num_envs' must have the form key=value, e\.g\. "):
        compose(config_dir, "cartpole_ppo", ["env.num_envs"])
    with pytest.raises(ConfigError, match=r"Override '=3' must have the form"):
        apply_overrides({}, ["=3"])


def test_apply_overrides_deep_merges_with_yaml_semantics() -> None:
    data = {"algo": {"gamma": 0.99, "num_steps": 128}, "tags": [1]}
    merged = apply_overrides(data, ["algo.gamma=0.9", "algo.norm=true", "tags=[2, 3]", "extra=null"])
    assert merged == {"algo": {"gamma": 0.9, "num_steps": 128, "norm": True}, "tags": [2, 3], "extra": None}
    assert data["algo"]["gamma"] == 0.99  # input left untouched


def test_composed_config_builds_and_typos_in_overrides_are_caught(config_dir: Path) -> None:
    config = compose(config_dir, "cartpole_ppo", ["algo.num_steps=1e3"])
    built = build_dataclass(ExperimentConfig, config, resolve_type=resolve_algo)
    assert built.algo == PPOConfig(num_steps=1000)
    assert built.env == EnvSection(id="CartPole-v1", num_envs=8, max_episode_steps=500)
    typo = compose(config_dir, "cartpole_ppo", ["algo.clip_cof=0.3"])
    with pytest.raises(ConfigError, match=r"Unknown config key 'algo.clip_cof'\. Did you mean 'clip_coef'\?"):
        build_dataclass(ExperimentConfig, typo, resolve_type=resolve_algo)


def test_list_options_is_sorted_and_empty_for_missing_group(config_dir: Path) -> None:
    assert list_options(config_dir, "algo") == ["grpo", "ppo"]
    assert list_options(config_dir, "nothing") == []


def test_load_yaml_resolves_and_reports_bad_files(tmp_path: Path) -> None:
    _write(tmp_path / "ok.yaml", "a: 1\nb: ${a}\n")
    assert load_yaml(tmp_path / "ok.yaml") == {"a": 1, "b": 1}
    _write(tmp_path / "empty.yaml", "")
    assert load_yaml(tmp_path / "empty.yaml") == {}
    _write(tmp_path / "list.yaml", "- 1\n- 2\n")
    with pytest.raises(ConfigError, match=r"must hold a mapping"):
        load_yaml(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match=r"Config file not found"):
        load_yaml(tmp_path / "missing.yaml")
    _write(tmp_path / "broken.yaml", "a: [1\n")
    with pytest.raises(ConfigError, match=r"Cannot parse"):
        load_yaml(tmp_path / "broken.yaml")


# --- ~key deletes a key (Hydra's syntax) -------------------------------------------------------------


def test_delete_override_removes_the_key_so_the_default_applies(config_dir: Path) -> None:
    config = compose(config_dir, "cartpole_ppo", ["~env.max_episode_steps", "~algo.clip_coef"])
    assert config["env"] == {"id": "CartPole-v1", "num_envs": 8}
    assert config["algo"] == {"type": "ppo", "num_steps": 128}
    built = build_dataclass(ExperimentConfig, config, resolve_type=resolve_algo)
    assert built.env.max_episode_steps is None and built.algo == PPOConfig()  # the dataclass defaults
    assert "runtime" not in compose(config_dir, "cartpole_ppo", ["~runtime"])  # a whole section


def test_delete_override_also_removes_the_experiments_own_keys_and_group_swaps(config_dir: Path) -> None:
    # env.num_envs is set by the experiment over the group file: deleting drops both layers
    # (runtime.num_workers interpolates it, so it goes too)
    deleted = compose(config_dir, "cartpole_ppo", ["~env.num_envs", "~runtime.num_workers"])
    assert "num_envs" not in deleted["env"]
    swapped = compose(config_dir, "cartpole_ppo", ["env=pendulum", "~env.num_envs", "~runtime.num_workers"])
    assert swapped["env"] == {"id": "Pendulum-v1"}
    with pytest.raises(ConfigError, match=r"Interpolation key 'env.num_envs' not found"):
        compose(config_dir, "cartpole_ppo", ["~env.num_envs"])  # what still refers to it is named


def test_delete_and_set_overrides_apply_in_order(config_dir: Path) -> None:
    assert compose(config_dir, "cartpole_ppo", ["~seed", "seed=3"])["seed"] == 3
    assert "seed" not in compose(config_dir, "cartpole_ppo", ["seed=3", "~seed"])
    # an interpolation sees the result: runtime.num_workers is ${env.num_envs}
    assert (
        compose(config_dir, "cartpole_ppo", ["~env.num_envs", "env.num_envs=5"])["runtime"]["num_workers"]
        == 5
    )


def test_apply_overrides_deletes_keys_and_leaves_input_untouched() -> None:
    data = {"algo": {"gamma": 0.99, "num_steps": 128}, "tags": [1]}
    assert apply_overrides(data, ["~algo.gamma", "~tags"]) == {"algo": {"num_steps": 128}}
    assert data == {"algo": {"gamma": 0.99, "num_steps": 128}, "tags": [1]}


def test_delete_override_of_a_missing_key_names_it_and_suggests_a_close_one(config_dir: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^Cannot delete '~algo\.clip_cof': the config has no key 'algo\.clip_cof'\. "
        r"Did you mean '~algo\.clip_coef'\? Keys under 'algo': type, num_steps, clip_coef\.$",
    ):
        compose(config_dir, "cartpole_ppo", ["~algo.clip_cof"])
    with pytest.raises(ConfigError, match=r"no key 'algp\.clip_coef'\. Did you mean '~algo'\? Keys: "):
        compose(config_dir, "cartpole_ppo", ["~algp.clip_coef"])
    with pytest.raises(
        ConfigError, match=r"no key 'policy\.hidden_sizes\.x'\. 'policy\.hidden_sizes' is not a mapping"
    ):
        compose(config_dir, "cartpole_ppo", ["~policy.hidden_sizes.x"])
    with pytest.raises(ConfigError, match=r"no key 'seed'"):  # deleted twice
        apply_overrides({"seed": 1}, ["~seed", "~seed"])


def test_delete_override_with_a_value_or_no_key_shows_the_right_form() -> None:
    for bad in ("~algo.gamma=0.9", "~", "~algo..gamma"):
        with pytest.raises(
            ConfigError, match=r"must have the form ~key \(no value\), e\.g\. ~policy\.normalize_obs"
        ):
            apply_overrides({"algo": {"gamma": 0.9}}, [bad])


def test_real_experiment_delete_override_restores_the_policy_default() -> None:
    from omnigym.platform.experiment import load_experiment

    assert load_experiment("ppo_reach").policy.normalize_obs is True  # type: ignore[attr-defined]
    assert load_experiment("ppo_reach", ["~policy.normalize_obs"]).policy.normalize_obs is False  # type: ignore[attr-defined]


# --- a pixel env does not silently keep a state-only obs_keys -----------------------------------------


def test_pixel_env_with_state_only_obs_keys_is_an_error_naming_the_fix() -> None:
    from omnigym.platform.experiment import load_experiment

    with pytest.raises(ConfigError) as error:
        load_experiment("ppo_reach", ["env.id=omnigym/ReachPixels-v0"])
    message = str(error.value)
    assert message.startswith(
        "env.kwargs.obs_keys is ['state'], but omnigym/ReachPixels-v0 is registered to emit"
    )
    assert "~env.kwargs.obs_keys" in message and "'env.kwargs.obs_keys=[image,state,text]'" in message
    # either fix works
    fixed = load_experiment("ppo_reach", ["env.id=omnigym/ReachPixels-v0", "~env.kwargs.obs_keys"])
    assert "obs_keys" not in fixed.env.kwargs and fixed.env.kwargs["reward_type"] == "dense"
    chosen = load_experiment(
        "ppo_reach", ["env.id=omnigym/ReachPixels-v0", "env.kwargs.obs_keys=[image,state]"]
    )
    assert chosen.env.kwargs["obs_keys"] == ["image", "state"]


def test_obs_keys_check_follows_the_registered_kwargs_not_the_name() -> None:
    from omnigym.platform.experiment import build_experiment

    def env(env_id: str, **kwargs: Any) -> dict[str, Any]:
        return {"env": {"id": env_id, "kwargs": kwargs}}

    with pytest.raises(
        ConfigError, match=r"env\.kwargs\.obs_keys is \['state', 'agents'\], but omnigym/DrivingVLM-v0"
    ):
        build_experiment(env("omnigym/DrivingVLM-v0", obs_keys=["state", "agents"]))
    with pytest.raises(
        ConfigError, match=r"^eval\.env_kwargs\.obs_keys is \['state'\].*~eval\.env_kwargs\.obs_keys"
    ):
        build_experiment(
            {**env("omnigym/PushCubePixels-v0"), "eval": {"env_kwargs": {"obs_keys": ["state"]}}}
        )
    build_experiment(env("omnigym/ReachPixels-v0", obs_keys=["image"]))  # image kept: fine
    build_experiment(
        env("omnigym/Reach-v0", obs_keys=["image", "state"])
    )  # a state env asked for images: fine
    build_experiment(env("CartPole-v1", obs_keys=["state"]))  # not registered with obs_keys: not checked
    build_experiment(env("NoSuchEnv-v9", obs_keys=["state"]))  # not registered at all: left to make_env


def test_eval_video_episodes_must_be_positive() -> None:
    from omnigym.platform.experiment import build_experiment

    assert build_experiment({"eval": {"video": True, "video_episodes": 3}}).eval.video_episodes == 3
    with pytest.raises(ConfigError, match=r"eval.video_episodes must be >= 1, got 0"):
        build_experiment({"eval": {"video_episodes": 0}})


def test_a_field_can_have_a_config_key_that_python_reserves() -> None:
    # runtime.async: "async" cannot be a dataclass field, so the field carries its key as metadata
    from omnigym.platform.runtime import RuntimeConfig

    runtime = build_dataclass(RuntimeConfig, {"type": "async", "async": {"workers": "process"}}, "runtime")
    assert runtime.async_.workers == "process"
    plain = config_to_dict(runtime)
    assert plain["async"]["workers"] == "process" and "async_" not in plain
    assert build_dataclass(RuntimeConfig, plain, "runtime") == runtime
    with pytest.raises(ConfigError, match=r"Unknown config key 'runtime\.async_'"):
        build_dataclass(RuntimeConfig, {"async_": {}}, "runtime")
