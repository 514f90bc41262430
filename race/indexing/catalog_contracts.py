"""Catalog overrides of an instance's generated contracts: they may weaken a claim, never
strengthen one.

Each override names a contract the instance serves and changes some of its claims; a change
that would claim more than was generated (a filter pushed where it was checked afterwards, an
access the backend does not give, fewer model calls, a local egress for a remote instance) is
bad input naming the instance, the contract and the field. The result is the generated
contract with the weaker claims and a description that says what the catalog changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from race.indexing.catalog import SUPPORT_RANK, ContractOverride
from rsc import Contract, ContractEgress, FilterSupport, FilterSupportClass, InputError


def weakened(
    contracts: Sequence[Contract], overrides: Mapping[str, ContractOverride], *, instance: str, where: str
) -> tuple[Contract, ...]:
    """``contracts`` with the catalog's ``overrides`` applied (by served contract id)."""
    by_id = {c.rsc_id: c for c in contracts}
    for rsc_id in sorted(overrides):
        if rsc_id not in by_id:
            raise InputError(
                f"instance {instance}: contracts.{rsc_id}: the instance serves no such contract "
                f"(it serves {sorted(by_id)})",
                where=where,
            )
    return tuple(
        _weaken(c, overrides[c.rsc_id], instance=instance, where=where) if c.rsc_id in overrides else c
        for c in contracts
    )


def _refuse(instance: str, contract: Contract, field: str, asked: object, generated: object, where: str) -> InputError:
    return InputError(
        f"instance {instance}: contracts.{contract.rsc_id}.{field}: {asked!r} is stronger than the generated "
        f"{generated!r}; an override may only weaken a claim",
        where=where,
    )


def _weaken(contract: Contract, override: ContractOverride, *, instance: str, where: str) -> Contract:
    update: dict[str, Any] = {}
    changed: list[str] = []
    filters = dict(contract.filters)
    for field, asked in sorted(override.filters.items()):
        target = FilterSupportClass(asked)
        current = contract.filter_support(field)
        if SUPPORT_RANK[target] > SUPPORT_RANK[current.support]:
            raise _refuse(instance, contract, f"filters.{field}", target.value, current.support.value, where)
        if target is current.support:
            continue
        if target is FilterSupportClass.NATIVE_FILTERED_ANN:
            raise InputError(
                f"instance {instance}: contracts.{contract.rsc_id}.filters.{field}: native_filtered_ann needs recall "
                "measured on the index; declare postfilter_only or unsupported",
                where=where,
            )
        if target is FilterSupportClass.UNSUPPORTED:
            filters.pop(field)
        else:
            filters[field] = FilterSupport(support=target, ops=current.ops)
        changed.append(f"filter {field} {target.value}")
    if override.filters:
        update["filters"] = filters
    early = {}
    for name in ("sorted_access", "random_access"):
        asked = getattr(override, name)
        generated = getattr(contract.early_stop, name)
        if asked and not generated:
            raise _refuse(instance, contract, name, asked, generated, where)
        if asked is False and generated:
            early[name] = False
            changed.append(f"no {name.replace('_', ' ')}")
    if early:
        update["early_stop"] = contract.early_stop.model_copy(update=early)
    if override.egress is not None and override.egress is not contract.egress:
        if override.egress is ContractEgress.LOCAL:
            raise _refuse(instance, contract, "egress", "local", contract.egress.value, where)
        update["egress"] = ContractEgress.REMOTE
        changed.append("egress remote")
    if override.snapshot is not None and override.snapshot != contract.snapshot.semantics:
        if override.snapshot == "generation":
            raise _refuse(instance, contract, "snapshot", "generation", contract.snapshot.semantics, where)
        update["snapshot"] = contract.snapshot.model_copy(update={"semantics": "live"})
        changed.append("snapshot live")
    if override.model_calls is not None:
        if override.model_calls < contract.model_calls:
            raise _refuse(instance, contract, "model_calls", override.model_calls, contract.model_calls, where)
        update["model_calls"] = override.model_calls
        changed.append(f"at most {override.model_calls} model calls")
    cost = {
        k: v
        for k, v in (("base_latency_ms", override.base_latency_ms), ("per_candidate_us", override.per_candidate_us))
        if v is not None
    }
    if cost:
        update["cost"] = contract.cost.model_copy(update=cost)
        changed.append("cost priors")
    if changed:
        update["description"] = f"{contract.description} Weakened by the catalog: {', '.join(changed)}."
    return Contract.model_validate({**contract.model_dump(mode="json"), **_dumped(update)})


def _dumped(update: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in update.items():
        if key == "filters":
            out[key] = {k: v.model_dump(mode="json") for k, v in sorted(value.items())}
        elif hasattr(value, "model_dump"):
            out[key] = value.model_dump(mode="json")
        elif isinstance(value, ContractEgress):
            out[key] = value.value
        else:
            out[key] = value
    return out
