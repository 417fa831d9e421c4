"""WSRL (Zhou et al., 2024): fine-tune a pre-trained offline agent online without keeping its data.

The online learner is SAC with a REDQ-style ensemble (10 layer-normed critics, min over a random
pair for targets) at a high update-to-data ratio, started from the policy and critics of an
offline run (CQL / Cal-QL). Before its first update the online trainer runs the frozen
pre-trained policy for ``warmup_steps`` env steps into an empty buffer, which re-calibrates the
critics to the online state distribution instead of letting them collapse. The losses and the
update are SAC's. zhouzypaul/wsrl is the reference implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from omnigym.platform.algorithms.sac import SAC, SACConfig


@dataclass
class WSRLConfig(SACConfig):
    """WSRL settings (zhouzypaul/wsrl defaults)."""

    type: str = "wsrl"
    num_critics: int = 10
    """Critics in the ensemble (REDQ)."""
    critic_subset: int = 2
    """Random members the target's min is over (REDQ)."""
    layer_norm: bool = True
    """Layer-normed critics."""
    updates_per_step: int = 4
    """Update-to-data ratio 4: four updates of ``batch_size`` per env step (wsrl's batch of 1024
    split into four critic minibatches of 256)."""
    policy_delay: int = 4
    """One actor and temperature step per four critic steps, as wsrl's high-UTD update (whose actor
    step sees the whole 1024-transition batch; here, the last 256)."""
    actor_lr: float = 1e-4
    """Adam learning rate of the policy."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics."""
    alpha_lr: float = 1e-4
    """Adam learning rate of the temperature."""
    backup_entropy: bool = False
    """No entropy term in the critic target (wsrl's SAC agent default)."""
    learning_starts: int = 0
    """No random-action phase: the warm-up with the pre-trained policy replaces it."""
    warmup_steps: int = 5_000
    """Env steps of the frozen pre-trained policy, stored in the (empty) online buffer, before the
    first update (read by the online trainer when it starts from an offline run, ``init_from``)."""
    offline_data_ratio: float = 0.0
    """Fraction of each batch drawn from the offline dataset (read by the online trainer):
    0 = WSRL (the offline data is discarded), 0.5 = RLPD-style symmetric sampling."""


class WSRL(SAC):
    """Online SAC fine-tuning from a pre-trained offline agent (see :meth:`load_pretrained`)."""

    name: ClassVar[str] = "wsrl"
    config_class: ClassVar[type[WSRLConfig]] = WSRLConfig
    config: WSRLConfig

    pretrained_networks: ClassVar[tuple[str, ...]] = ("q", "q_target", "log_alpha")
    """Networks taken from the pre-trained agent (``log_alpha`` only if it has one)."""

    def load_pretrained(self, state: dict[str, Any]) -> list[str]:
        """As the base, with critics required: ``q`` must be there (``q_target`` defaults to it)."""
        theirs: dict[str, dict[str, Any]] = dict(state.get("networks", {}))
        if "q" not in theirs:
            raise ValueError(f"the pre-trained state has no critics 'q' (it has {sorted(theirs)})")
        theirs.setdefault("q_target", theirs["q"])
        return super().load_pretrained({**state, "networks": theirs})
