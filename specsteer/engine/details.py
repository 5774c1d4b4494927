"""Each token event's numbers as the engine assembles them (``DecodeConfig.details``): a draft's from the Edge and
an in-process Cloud, a chosen token's from the Edge, every alternative they list named by its text."""

from __future__ import annotations

from dataclasses import replace

from specsteer.edge.session import Edge
from specsteer.method.token_details import TokenDetails, named
from specsteer.protocol.link import Link


def draft_details(edge: Edge, drafts: list[int], link: Link, alpha: float, tokenizer) -> list[TokenDetails | None]:
    """Each draft's numbers: the Edge's p_S+ and top alternatives, with the Cloud's p_L, p_S0 and theirs when
    an in-process Cloud gave them (``link.last_scores``: the instrumentation of this round's verdict)."""
    scores = link.last_scores if len(link.last_scores) == len(drafts) else []
    numbers: list[TokenDetails | None] = []
    for position, edge_numbers in enumerate(edge.draft_details(drafts)):
        cloud = scores[position] if scores else None
        combined = replace(edge_numbers, alpha=alpha, cloud=cloud)
        numbers.append(named_details(combined, tokenizer))
    return numbers


def named_details(details: TokenDetails | None, tokenizer) -> TokenDetails | None:
    """``details`` with the text of every alternative it lists (one id decoded at a time)."""
    if details is None:
        return None

    def decode(token: int) -> str:
        return tokenizer.decode([token], skip_special_tokens=False)

    cloud = details.cloud
    if cloud is not None:
        cloud = replace(cloud, top_large=named(cloud.top_large, decode), top_generic=named(cloud.top_generic, decode))
    return replace(
        details, cloud=cloud, top_private=named(details.top_private, decode), top_drawn=named(details.top_drawn, decode)
    )
