"""One opted-in job object, read once: its view and its owner's settings, or why Bellows
leaves it alone.

The reader (to build the job's ``JobSpec``) and the actuator (to plan its steps) both start
from :func:`opted_job`, so that the order of the checks and what each allows is written
once. Pure, no I/O: the caller has the object and has checked that it opted in
(:func:`bellows.kube.keys.opted_in`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bellows.kube import keys
from bellows.kube.kinds import JobView, KindAdapter, finished_state, foreign_manager, kueue_refusal

__all__ = ["LeftAlone", "OptedJob", "opted_job"]


@dataclass(frozen=True)
class OptedJob:
    """A job Bellows may size: its ``view`` (with the values of the batch env vars that
    ``settings`` names, unless asked without) and its owner's ``settings``, parsed from its
    annotations."""

    view: JobView
    settings: keys.Settings


@dataclass(frozen=True)
class LeftAlone:
    """Why Bellows leaves an opted-in job alone.

    ``finished``: it has (``detail`` is ``Succeeded`` or ``Failed``); ``foreign``: another
    controller runs it (``detail`` is its ``spec.runPolicy.managedBy``), so nothing may
    be written to it; ``refused``: another controller sizes it, or Kueue cooperation is
    off for a job in a Kueue queue (``detail`` says which, for the owner).
    """

    why: Literal["finished", "foreign", "refused"]
    detail: str


def opted_job(
    kind: KindAdapter, obj: Mapping[str, Any], *, kueue: bool, env: bool = True
) -> OptedJob | LeftAlone:
    """What the opted-in job ``obj`` of ``kind`` is to Bellows; ``kueue``: whether Kueue
    cooperation is on (``controller.kueue.enabled``). ``env=False``: a view without the
    batch env vars' values (the actuator reads them where a step needs them, and may
    halt a job whose env it could not patch).

    ``spec.runPolicy.managedBy`` is read before any other field: of another controller's
    job nothing else is read. :class:`bellows.jobs.SpecError` names the first spec field or
    annotation that is wrong.
    """
    manager = foreign_manager(obj, kind.manager)
    if manager is not None:
        state = finished_state(obj)
        return LeftAlone("foreign", manager) if state is None else LeftAlone("finished", state)
    view = kind.view(obj, ())
    if view.finished is not None:
        return LeftAlone("finished", view.finished)
    if view.blocker is not None:
        return LeftAlone("refused", view.blocker)
    if view.queue is not None and not kueue:
        return LeftAlone("refused", kueue_refusal(view.queue))
    settings = keys.parse_settings(view.annotations)
    return OptedJob(kind.view(obj, settings.env_names) if env else view, settings)
