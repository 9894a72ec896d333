"""A job given a GPU type is asked onto that type's nodes (``OnType``): a node selector Bellows
writes, replaces and takes out, marked as its own; an owner's selector stands, and a marker a
tenant forged moves nothing but its own job's template."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bellows.emulator.patching import merge_patch
from bellows.kube.placement import (
    GPU_TYPE,
    OnType,
    Pinned,
    Placement,
    placed_template,
    template_product,
    template_type,
)

LABEL = "nvidia.com/gpu.product"


def _template(selector: dict[str, str] | None = None, note: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {}, "spec": {"containers": [{"name": "c"}]}}
    if selector is not None:
        out["spec"]["nodeSelector"] = dict(selector)
    if note is not None:
        out["metadata"]["annotations"] = {GPU_TYPE: note}
    return out


def _applied(template: dict[str, Any], ask: Any) -> dict[str, Any]:
    patch = placed_template(template, selector={"job": "a"}, placement=ask)
    return merge_patch(template, patch) if patch else template


def test_a_type_is_selected_replaced_and_taken_out_by_bellows_alone() -> None:
    t4 = OnType(Placement.NONE, LABEL, "Tesla-T4", "t4")
    on_t4 = _applied(_template({"disk": "ssd"}), t4)
    assert on_t4["spec"]["nodeSelector"] == {"disk": "ssd", LABEL: "Tesla-T4"}
    assert template_type(on_t4) == "t4"
    assert template_product(on_t4, LABEL) == "Tesla-T4"
    assert placed_template(on_t4, selector={"job": "a"}, placement=t4) == {}  # asked again
    a100 = _applied(on_t4, OnType(Placement.NONE, LABEL, "NVIDIA-A100", "a100"))
    assert a100["spec"]["nodeSelector"] == {"disk": "ssd", LABEL: "NVIDIA-A100"}
    assert template_type(a100) == "a100"
    untyped = _applied(a100, Placement.NONE)  # a one-type ask: Bellows' selector taken out
    assert untyped["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert GPU_TYPE not in (untyped["metadata"].get("annotations") or {})
    assert template_type(untyped) is None


def test_an_owners_selector_on_the_label_stands() -> None:
    owners = _template({LABEL: "Tesla-T4"})
    ask = OnType(Placement.NONE, LABEL, "NVIDIA-A100", "a100")
    assert placed_template(owners, selector={"job": "a"}, placement=ask) == {}
    assert placed_template(owners, selector={"job": "a"}, placement=Placement.NONE) == {}
    assert template_product(owners, LABEL) == "Tesla-T4"  # where its pods can run
    assert template_type(owners) is None  # not a type Bellows gave it


def test_a_selector_changed_after_bellows_wrote_it_is_the_owners() -> None:
    changed = _template({LABEL: "NVIDIA-A100"}, note=f"t4 ({LABEL}=Tesla-T4)")
    assert template_type(changed) is None
    patch = placed_template(
        changed, selector={"job": "a"}, placement=OnType(Placement.NONE, LABEL, "Tesla-T4", "t4")
    )
    assert patch == {"metadata": {"annotations": {GPU_TYPE: None}}}  # the stale marker only


@given(
    note=st.one_of(
        st.text(max_size=40),
        st.builds(
            lambda k, v: f"x ({k}={v})",
            st.sampled_from(["disk", LABEL, "zone"]),
            st.sampled_from(["ssd", "Tesla-T4", "a"]),
        ),
    ),
    selector=st.dictionaries(
        st.sampled_from(["disk", LABEL, "zone"]), st.sampled_from(["ssd", "Tesla-T4", "a"])
    ),
)
def test_a_forged_marker_takes_out_only_what_it_names_in_its_own_template(
    note: str, selector: dict[str, str]
) -> None:
    """Whatever a tenant writes as the marker, the patch touches only the template it is on,
    removes at most the one selector entry the marker names (and only while it holds that
    value), and never writes a label other than the type label."""
    template = _template(selector, note)
    for ask in (Placement.NONE, OnType(Placement.NONE, LABEL, "Tesla-T4", "t4")):
        patch = placed_template(template, selector={"job": "a"}, placement=ask)
        changed = (patch.get("spec") or {}).get("nodeSelector") or {}
        removed = {k for k, v in changed.items() if v is None}
        assert len(removed) <= 1
        for key in removed:
            assert f"({key}={selector[key]})" in note
        assert {k for k, v in changed.items() if v is not None} <= {LABEL}
        after = merge_patch(template, patch) if patch else template
        again = placed_template(after, selector={"job": "a"}, placement=ask)
        assert again == {}  # one patch reaches what the ask wants


def test_a_type_rides_on_a_node_pin() -> None:
    pinned = OnType(Pinned(Placement.NONE, ("t4-0",)), LABEL, "Tesla-T4", "t4")
    placed = _applied(_template(), pinned)
    assert placed["spec"]["nodeSelector"] == {LABEL: "Tesla-T4"}
    terms = placed["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                       "values": ["t4-0"]}]}]  # fmt: skip
