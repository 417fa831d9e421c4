"""A planner over a learned controller: sub-goals in text every K steps, a controller at every step.

HiVLA and Instruct-to-Act decouple an embodied agent into a planner that names the next sub-goal
in words and a fast controller conditioned on it. Here:

* :mod:`~omnigym.policies.hierarchical.subgoals`: the sub-goal vocabulary of a task, the
  relabelling of expert steps with their sub-goal (Instruct-to-Act's relabelled segments) and the
  fixed text embedding the controller is conditioned on;
* :mod:`~omnigym.policies.hierarchical.tasks`: the tasks an agent knows (PickPlace, the two-stage
  push): their sub-goals, instruction, stage rule and relabelling;
* :mod:`~omnigym.policies.hierarchical.planners`: planners (scripted, instruction-only, or any
  registered text policy such as ``vlm``);
* :mod:`~omnigym.policies.hierarchical.policy`: the ``hierarchical`` policy, planner and
  controller as one agent;
* :mod:`~omnigym.policies.hierarchical.planner_env`: the planner's own env (one text action = one
  sub-goal run by the frozen controller for K steps), on which GRPO trains a VLM planner.
"""
