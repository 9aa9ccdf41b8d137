"""One fault case's outcome (case, expected, observed, pass) and the suite's one table."""
from __future__ import annotations

import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable


@dataclass
class Outcome:
    group: str  # kills | writers | damage | input | security
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


def status(group: str, case: str, response: Any, want: set[int], names: str | None = None) -> Outcome:
    """An HTTP answer with one of the ``want`` statuses (and, for an error, a message naming ``names``)."""
    code = response.status_code
    ok = code in want
    observed = str(code)
    if code >= 400:
        try:
            message = response.json()["error"]["message"]
        except Exception:
            message = response.text[:100]
        observed += f" {message[:110]}"
        if names is not None:
            ok = ok and names.lower() in message.lower()
    expected = "/".join(str(w) for w in sorted(want)) + (f" naming {names!r}" if names else "")
    return Outcome(group, case, expected, observed, ok and code < 500)


def print_table(outcomes: list[Outcome]) -> None:
    width = max(len(o.case) for o in outcomes) + 2
    print(f"{'':4} {'group':<9} {'case':<{width}} {'expected':<40} observed")
    for o in outcomes:
        print(f"{'ok' if o.ok else 'FAIL':<4} {o.group:<9} {o.case:<{width}} {o.expected[:40]:<40} {o.observed}")
