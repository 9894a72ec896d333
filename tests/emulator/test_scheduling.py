"""The emulated scheduler's scoring: pods spread by default, pack with Bellows' term."""

from __future__ import annotations

from bellows.emulator.affinity import node_requirement
from bellows.emulator.scheduling import Pod, Scheduler, preferred_terms
from bellows.kube.placement import HOSTNAME, Placement, pack_term, placed_template

LABELS = {"training.kubeflow.org/job-name": "a", "training.kubeflow.org/operator-name": "x"}


def _cluster() -> Scheduler:
    return Scheduler({f"n{i}": (4, {HOSTNAME: f"n{i}"}) for i in range(4)})


def _place(s: Scheduler, terms: bool, count: int = 4) -> set[str]:
    template: dict[str, object] = {"spec": {}}
    if terms:
        template = placed_template(template, selector=LABELS, placement=Placement.PACK)
    pods = [Pod("a", LABELS, 1, preferred_terms(template)) for _ in range(count)]
    for pod in pods:
        assert s.bind(pod) is not None
    return s.nodes_of("a")


def test_default_scoring_spreads_a_job_over_empty_nodes() -> None:
    assert len(_place(_cluster(), terms=False)) == 4


def test_pack_term_puts_the_job_on_the_fewest_nodes() -> None:
    assert len(_place(_cluster(), terms=True)) == 1
    assert len(_place(_cluster(), terms=True, count=6)) == 2


def test_a_pod_that_fits_nowhere_stays_pending_and_release_frees() -> None:
    s = Scheduler({"n0": (2, {HOSTNAME: "n0"})})
    _place(s, terms=True, count=2)
    assert s.bind(Pod("b", {}, 1)) is None
    s.release("a")
    assert s.bind(Pod("b", {}, 1)) == "n0"


def test_terms_are_read_from_a_template() -> None:
    (term,) = preferred_terms({"spec": {"affinity": {"podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [pack_term(LABELS)]}}}})  # fmt: skip
    assert (term.weight, dict(term.labels), term.topology_key) == (100, LABELS, HOSTNAME)


def test_preferred_node_affinity_outweighs_spreading() -> None:
    s = _cluster()
    spec = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n2"]}
                            ]
                        },
                    }
                ]
            }
        }
    }
    pod = Pod("a", LABELS, 1, (), node_requirement(spec))
    assert s.bind(pod) == "n2"  # not the emptiest first by name: the preferred node
    for _ in range(3):
        s.bind(Pod("a", LABELS, 1, (), node_requirement(spec)))
    assert s.nodes_of("a") == {"n2"}
    assert s.bind(Pod("a", LABELS, 1, (), node_requirement(spec))) != "n2"  # full: elsewhere
