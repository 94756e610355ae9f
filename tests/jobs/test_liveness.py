"""The rule that says no worker is left to finish a job (pure; times are given, not slept)."""

from __future__ import annotations

from jobs.liveness import JobTimeoutError, Liveness


def test_workers_are_gone_only_after_the_grace_period_without_a_sign_of_life() -> None:
    liveness = Liveness(grace_s=10, last_alive=0)
    liveness.observe(5, alive=False, done=0)
    assert liveness.gone_for(9) is None
    assert liveness.gone_for(11) == 11


def test_a_live_group_or_a_completed_record_restarts_the_grace_period() -> None:
    liveness = Liveness(grace_s=10, last_alive=0)
    liveness.observe(8, alive=True, done=0)
    assert liveness.gone_for(15) is None
    liveness.observe(16, alive=False, done=3)  # between members, yet records still arrive
    assert liveness.gone_for(25) is None
    liveness.observe(26, alive=False, done=3)
    assert liveness.gone_for(27) == 11


def test_a_timeout_is_still_a_timeout_error_for_callers_that_catch_one() -> None:
    assert isinstance(JobTimeoutError("late"), TimeoutError)
