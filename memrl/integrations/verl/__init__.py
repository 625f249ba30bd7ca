"""memrl on verl 0.9 (``pip install memrl[verl]``): agent loops, reward function, tools, data, configs.

Plugged in through verl's own extension points only (no fork, no patch):

* agent loops ``memagent``, ``memupdate``, ``membuilder`` (:mod:`.loops`), registered with verl's
  ``@register`` when :mod:`.plugin` is imported, which verl does in every Ray worker through the
  ``verl.plugins`` entry point memrl declares, and listed with their options in the packaged
  ``memrl/resources/verl/agent_loops.yaml`` (``actor_rollout_ref.rollout.agent.agent_loop_config_path``;
  :mod:`.resources` gives its absolute path);
* the agents call the policy through memrl's token protocol on ``server_manager.generate``
  (:mod:`.engine`), so the same agent code runs in ``memrl eval``, ``memrl train`` and verl;
* ``reward.custom_reward_function`` = ``pkg://memrl.integrations.verl.reward`` / ``compute_score``;
* verl tool classes for MemUpdate's six tools (:mod:`.tools`, ``memrl/resources/verl/memupdate_tools.yaml``);
* parquet rows from ``memrl data prepare --format verl --task read|update|build`` (:mod:`.rows`).

* before a launch: :mod:`.preflight` (GPU, versions, free memory, CPUs, attention implementation) and
  :mod:`.memory_plan` (the per-GPU memory estimate of a config, checked against the plan it states); after
  a smoke run: :mod:`.smoke` (the per-task summary).

How to run it at each scale, what it has (not) been run on, and verl's limits: docs/verl.md.

**ADRPO's attribution weight is not applied inside verl.** verl 0.9's advantage estimators registered
with ``core_algos.register_adv_est`` are called (``verl.trainer.ppo.ray_trainer.compute_advantage``)
with ``token_level_rewards``, ``response_mask``, ``config`` and ``index`` (the prompt uid) only; the
per-sample ``non_tensor_batch`` (where a loop's ``extra_fields`` land) is passed to the built-in ``gdpo``
estimator alone, and with ``trainer.use_v1`` the GRPO path (``compute_advantage_for_multi_trajectories``)
broadcasts one advantage per episode. So no registered estimator can see which output is the dominant
memory type's. What memrl does instead: one row per (session, memory type), so each GRPO group holds the
rollouts of one agent on one session (ADRPO's per-agent comparison, exact) and its reward is ADRPO's
``task x (1 - 0.8 LP)`` (exact); the 4x weight of the dominant type is computed and logged
(``reward_extra_info.advantage_weight``) but every output is trained with weight 1. memrl's own trainer
(``memrl train``) applies it.
"""
