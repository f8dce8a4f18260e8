"""Blocking observation of the unobserved tail (behaviour §4.5 `sync_observe`): a turn past `blockAfter`
waits for it, a manual "observe now" runs it.

Chunks still waiting are activated first so the log stays in conversation order; the tail is observed
in batches no larger than the Observer input cap, each committing on its own; the newest messages (the
retention floor, at least the prompt being answered) stay raw.
"""

from __future__ import annotations

from sqlalchemy import Connection

from om_core.config.options import ResolvedConfig
from om_core.coordination import Keys
from om_core.engine import activation, extraction, resource, resource_observation
from om_core.engine.core import EngineCore, policy_tokens
from om_core.engine.cycle import Cycle, run_if_enabled
from om_core.engine.grouping import GroupPlace, group_observations
from om_core.engine.observer_call import observe_messages
from om_core.engine.ports import ObserverDegenerateError
from om_core.engine.tasks import Observe, lookup_key
from om_core.engine.tool_pairs import spans_after
from om_core.engine.window import cut_for_budget, cut_keeping_tail
from om_core.errors import OperationFailed
from om_core.extractors import persist
from om_core.policy import decisions
from om_core.store import groups, history, records
from om_core.store.types import StoredEvent, WriteResult

#: Batches per run: a backlog larger than this many Observer inputs is finished by the next run.
_MAX_BATCHES = 64


def observe(core: EngineCore, task: Observe) -> bool:
    """True when anything was observed or activated. Raises `OperationFailed` when an Observer call
    failed (its failed event is written), so a turn waiting on it reports itself degraded.

    In resource scope the resource's batches run instead, each holding its own threads' locks."""
    cfg = core.thread_config(task.thread_id)
    if cfg.enabled and resource.is_shared(cfg):
        return resource_observation.observe_resource(core, task, cfg)
    return run_if_enabled(core, task, lambda cfg: _observe_locked(core, task, cfg))


def _observe_locked(core: EngineCore, task: Observe, cfg: ResolvedConfig) -> bool:
    observed_any = False
    for _batch in range(task.batches or _MAX_BATCHES):
        if activation.activate(core, task.thread_id, activate_all=True, triggered_by="threshold"):
            observed_any = True
        outcome = _observe_one_batch(core, task, cfg, manual=task.trigger == "manual")
        if outcome is None:
            break
        observed_any = observed_any or outcome
        if not outcome:
            break
    return observed_any


def _observe_one_batch(core: EngineCore, task: Observe, cfg: ResolvedConfig, *, manual: bool) -> bool | None:
    """One Observer call and commit. None when there is nothing (more) to observe."""
    key = lookup_key(task.thread_id)
    head = records.get_head(core.db, key)
    if head is None:
        return None
    window = core.window(task.thread_id, head.last_observed_seq)
    threshold = decisions.dynamic_threshold(
        policy_tokens(cfg.observation.message_tokens), head.observation_token_count
    )
    if not window.messages or window.tokens < (threshold if manual else 1):
        return None
    buffer_activation = cfg.observation.buffer_activation
    floor = decisions.retention_floor(buffer_activation, threshold) if buffer_activation is not None else 1.0
    # The kept tail is over the threshold only when one message is; it is observed by the next batch.
    spans = spans_after(core, task.thread_id, head.last_observed_seq, window)  # pairs stay together
    cut = cut_keeping_tail(window, max(floor, 1.0), max_keep=threshold - 1, spans=spans)
    if cut <= head.last_observed_seq:
        return None
    if head.chunks:
        return None  # activation above did not clear the list (retired head); the next step retries
    cut = min(cut, cut_for_budget(window, core.settings.observer_input_cap_tokens, spans))
    from_seq = head.last_observed_seq
    with core.db.connect() as conn:
        thread = history.get_thread(conn, task.thread_id)
        batch = [
            m
            for m in history.load_parts(conn, task.thread_id, after_seq=from_seq, upto_seq=cut)
            if m.has_visible_content
        ]
    if not batch:
        return None  # nothing unobserved: never commit a cursor computed from nothing (H4)
    tokens = window.tokens_upto(cut)
    cycle = Cycle.of(core, task, head, tokens, cycle_id=f"{task.cycle_id}-{from_seq}")
    cycle.start(core.marker_config(cfg))
    run = extraction.plan(cfg, "observer", thread, memory=core.db)
    try:
        output = observe_messages(core, cfg, head, batch, cycle.usage, thread=thread, extractors=run)
    except Exception as exc:
        cycle.fail(exc)
        raise OperationFailed(str(exc) or type(exc).__name__) from exc
    text = output.observations.strip()
    if not text:
        # Committing would move the cursor past parts whose content is nowhere in the log. Keep them raw,
        # and fail like a failed model call, so a turn that waited on this reports itself degraded.
        problem = ObserverDegenerateError("no observations for a non-empty transcript")
        cycle.fail(problem)
        raise OperationFailed(str(problem)) from problem
    last_observed_at = max(m.created_at for m in batch)
    text, group = group_observations(
        cfg,
        text,
        batch,
        GroupPlace(task.thread_id, head.resource_id, key, cycle.cycle_id, last_observed_at),
    )
    observation_tokens = core.counter.count_string(text)
    values = extraction.inline_values(run, output.raw)
    end = cycle.ending(
        tokens_observed=tokens,
        observation_tokens=observation_tokens,
        observations=text,
        current_task=output.current_task,
        suggested_response=output.suggested_response,
        seq_range=(from_seq, cut),
        extraction=persist.end_fields(values),
    )

    def write(conn: Connection) -> tuple[WriteResult, list[StoredEvent]]:
        result, stored = records.commit_observation(
            conn,
            head.id,
            from_seq=from_seq,
            to_seq=cut,
            observations=text,
            token_count=observation_tokens,
            observed_message_tokens=tokens,
            last_observed_at=last_observed_at,
            thread_metadata={
                "currentTask": output.current_task,
                "suggestedResponse": output.suggested_response,
                **extraction.metadata_patch(run, values),
            },
            events=end,
        )
        if result.applied and group is not None:
            groups.insert(conn, [group])
        return result, stored

    result = cycle.commit(write)
    if not result.applied:
        cycle.fail(RuntimeError(f"commit refused: {result.reason}"))
        return False
    core.coordination.set_int(Keys.buffer_boundary(key), None)
    extraction.request_structured(
        core,
        run,
        thread_id=task.thread_id,
        source_cycle_id=cycle.cycle_id,
        record_id=head.id,
        seq_range=(from_seq, cut),
    )
    if cfg.observation.thread_title and output.thread_title:
        core.update_title(task.thread_id, head, output.thread_title, cycle.cycle_id)
    return True
