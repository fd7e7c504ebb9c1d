"""/ui's search playground: a question, the options of ``search`` (or ``recall``), the hits."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..._remote.wire import error_body
from ..._store.options import SEARCH_OPTIONS
from ...errors import InvalidInput
from ...memory import Memory
from .pages import Pages

__all__ = ["router", "SEARCH_KINDS", "defaults"]

SEARCH_KINDS = ("message", "summary", "fact", "note")  # the boxes offered (``kinds`` of search)


def router(ui: Pages) -> APIRouter:
    """The playground's page."""
    r = APIRouter()

    @r.get("/ui/search", include_in_schema=False)
    def search_page(request: Request) -> Response:
        """The search playground: a question, the options of ``search`` (or ``recall``), the hits."""
        return ui.page(lambda m, request: ("search.html", _search(m, request)))(request)

    return r


def _search(m: Memory, request: Request) -> dict[str, Any]:
    """The playground's form values and, when a question was asked, the hits."""
    q = request.query_params
    form = defaults()
    form.update({k: q[k] for k in form if k != "kinds" and k in q})
    if q.get("q"):  # an asked form: unchecked boxes are kinds left out
        form["kinds"] = q.getlist("kinds")
    users = m.state.users(m.tenant)[:1000]
    data: dict[str, Any] = {"form": form, "users": users, "kinds_all": SEARCH_KINDS, "hits": None, "error": None}
    if form["q"]:
        try:
            data["hits"] = _hits(m, form)
        except InvalidInput as e:  # a bad option is shown beside the form it came from
            data["error"] = error_body(e)
    return data


def defaults() -> dict[str, Any]:
    """The form as first shown: ``search``'s own defaults (``SearchOptions``), so it finds what ``search()`` finds."""
    d = SEARCH_OPTIONS
    return {
        "q": "", "user": "", "op": "search", "top_k": "10",
        "min_score": "" if d.min_score is None else f"{d.min_score:g}", "mode": d.mode, "fusion": d.fusion,
        "session_id": "", "exclude_session": "", "category": "", "kinds": list(d.kinds or SEARCH_KINDS),
    }


def _hits(m: Memory, form: dict[str, Any]) -> list[Any]:
    """Run the playground's call with its options."""
    top_k = _number("top_k", form["top_k"], int)
    if form["op"] == "recall":
        return m.recall(form["q"], top_k, user=form["user"], category=form["category"] or None)
    kw: dict[str, Any] = {"top_k": top_k, "kinds": tuple(form["kinds"]), "mode": form["mode"],
                          "min_score": None if form["min_score"] == "" else _number("min_score", form["min_score"], float)}
    for name in ("fusion", "session_id", "exclude_session"):
        if form[name]:
            kw[name] = form[name]
    return m.search(form["q"], user=form["user"], **kw)


def _number(field: str, value: str, kind: type) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise InvalidInput(field, f"must be a number, not {value!r}") from None
