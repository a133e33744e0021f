"""agentrl: post-training language-model agents on the BugFix gym, small and fast on a CPU.

``import agentrl as arl`` gives the chapter's API (DESIGN.md §1): the gym (``make_tasks``,
``FAMILIES``, ``BugFixEnv``, ``scripted_policy``), the renderer (``build_tokenizer``,
``Trajectory``, ``OWNER``, ``collate``), the model (``TinyAgent``, ``sequence_log_probs``,
``entropy_from_logits``), rollouts (``scripted_rollout``, ``rollout_batch``) and the recipes.
"""
from .checkpoint import load_model, save_checkpoint
from .env import BugFixEnv
from .model import TinyAgent, TinyAgentConfig, entropy_from_logits, sequence_log_probs
from .ops import OPS
from .policies import scripted_policy
from .recipes.diagnostics import check_rendering, describe, informative_fraction, probe, strip_wrappers
from .recipes.dpo import dpo_loss, episode_logp, make_pairs, preference_loss, train_dpo
from .recipes.evaluation import action_entropy, pass_rate
from .recipes.grpo import GRPOConfig, train_grpo
from .recipes.online_dpo import train_online_dpo
from .recipes.reinforce import reinforce_step, train_rl
from .recipes.rejection import cap_per_task, dedup_by_actions, expert_iteration, family_share, keep_successes
from .recipes.rft_baseline import group_baseline_weights, rft_baseline_iteration, weighted_sft_loss
from .recipes.select import select_sft_checkpoint
from .recipes.sft import sft_loss, sft_train
from .recipes.star import star_iteration
from .render import OWNER, Trajectory, collate
from .rollout import rollout_batch, scripted_rollout
from .tasks import FAMILIES, make_tasks
from .tokenizer import build_tokenizer

__version__ = '0.1.0'
