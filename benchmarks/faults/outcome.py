"""One fault case's outcome (case, expected, observed, pass) and the suite's one table."""
from __future__ import annotations

import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable


@dataclass
class Outcome:
    group: str  # one of run.PARTS
    case: str
    expected: str
    observed: str
    ok: bool

    def row(self) -> dict[str, Any]:
        return asdict(self)


def refused(group: str, case: str, call: Callable[[], Any], names: str) -> Outcome:
    """``call`` must raise one of lab's own errors whose message contains ``names`` (the problem
    named); returning normally or any other exception (a crash) fails the case."""
    from lab.errors import LabError

    expected = f"refused naming {names!r}"
    try:
        call()
    except LabError as exc:
        message = str(exc).splitlines()[0][:150]
        return Outcome(group, case, expected, f"{type(exc).__name__}: {message}", names.lower() in str(exc).lower())
    except Exception as exc:  # a crash: not one of lab's errors
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()[:150]
        return Outcome(group, case, expected, f"CRASH {last}", False)
    return Outcome(group, case, expected, "accepted", False)


def error_of(response: Any) -> dict[str, Any]:
    """lab's error body (``{"error": {"status", "code", "message", "field"}}``) of a response, or {}."""
    try:
        got = response.json()["error"]
        return got if isinstance(got, dict) else {}
    except Exception:
        return {}


def status(group: str, case: str, response: Any, want: set[int], names: str | None = None, *,
           field: str | None = None, code: str | None = None, absent: tuple[str, ...] = ()) -> Outcome:
    """An HTTP answer with one of the ``want`` statuses and, for an error, the reason it gives:
    a message naming ``names``, an error field ending in ``field``, the error code ``code``; and
    none of ``absent`` anywhere in the body (a secret, another namespace's text)."""
    status_code = response.status_code
    ok = status_code in want
    observed = str(status_code)
    if status_code >= 400:
        err = error_of(response)
        message = err.get("message") if err else response.text[:100]
        observed += f" {str(message)[:150]}"
        if field is not None or code is not None:
            observed += f" [code {err.get('code')}, field {err.get('field')}]"
        if names is not None:
            ok = ok and names.lower() in str(message).lower()
        if field is not None:
            ok = ok and str(err.get("field") or "").endswith(field)
        if code is not None:
            ok = ok and err.get("code") == code
    leaked = [a for a in absent if a in response.text]
    if leaked:
        observed += f"; LEAKED {leaked}"
    expected = "/".join(str(w) for w in sorted(want)) + (f" naming {names!r}" if names else "") + \
        (f", field ..{field}" if field else "") + (f", code {code}" if code else "")
    return Outcome(group, case, expected, observed, ok and not leaked and (status_code < 500 or status_code in want))


def same_answer(group: str, case: str, a: Any, b: Any, a_id: str, b_id: str, want: set[int]) -> Outcome:
    """Two answers a caller must not be able to tell apart: the same status and the same message
    once each names its own id (``a`` about ``a_id``, ``b`` about ``b_id``)."""
    ma = str(error_of(a).get("message", a.text)).replace(a_id, "<id>")
    mb = str(error_of(b).get("message", b.text)).replace(b_id, "<id>")
    ok = a.status_code == b.status_code and a.status_code in want and ma == mb
    return Outcome(group, case, f"{'/'.join(map(str, sorted(want)))}, the same answer either way",
                   f"{a.status_code} {ma[:110]} | {b.status_code} {mb[:110]}", ok)


def print_table(outcomes: list[Outcome]) -> None:
    width = max(len(o.case) for o in outcomes) + 2
    print(f"{'':4} {'group':<9} {'case':<{width}} {'expected':<40} observed")
    for o in outcomes:
        print(f"{'ok' if o.ok else 'FAIL':<4} {o.group:<9} {o.case:<{width}} {o.expected[:40]:<40} {o.observed}")
