"""The stub declares each session and handle call once per shape: blocking (``_SessionCalls``,
``_HandleCalls``) and awaited (``_AsyncSessionCalls``, ``_AsyncHandleCalls``). Python's typing cannot
derive one shape from the other (no type maps ``T`` to ``Awaitable[T]`` over a class), so this test holds
them together: the same calls, the same parameters, and each answer the blocking one awaited. A call added
to one shape alone, or a parameter changed in one, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import subagent_tracker

_STUB = ast.parse(Path(subagent_tracker.__file__).with_name("_native.pyi").read_text())
_CLASSES = {node.name: node for node in _STUB.body if isinstance(node, ast.ClassDef)}

#: Calls that answer alike on both shapes, and why.
_SAME_ON_BOTH = {
    # A blocking wait for a runner on a thread of its own, whichever API its session uses.
    "wait_resumed",
}


def _calls(class_node: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in class_node.body if isinstance(node, ast.FunctionDef)}


def _keeps_its_answer(call: ast.FunctionDef) -> bool:
    """Properties read what the object holds; the waits are coroutines on both shapes already."""
    returns = ast.unparse(call.returns) if call.returns else ""
    is_property = any(ast.unparse(decorator) == "property" for decorator in call.decorator_list)
    return is_property or returns.startswith("Coroutine[") or call.name in _SAME_ON_BOTH


def _drift(blocking: ast.ClassDef, awaited: ast.ClassDef) -> list[str]:
    """Where the awaited shape is not the blocking shape awaited."""
    blocking_calls, awaited_calls = _calls(blocking), _calls(awaited)
    drift = [f"{name}: declared on one shape only" for name in set(blocking_calls) ^ set(awaited_calls)]
    for name in set(blocking_calls) & set(awaited_calls):
        call, twin = blocking_calls[name], awaited_calls[name]
        if ast.dump(call.args) != ast.dump(twin.args):
            drift.append(f"{name}: other parameters")
        if [ast.unparse(node) for node in call.decorator_list] != [
            ast.unparse(node) for node in twin.decorator_list
        ]:
            drift.append(f"{name}: other decorators")
        answer = ast.unparse(call.returns) if call.returns else "None"
        expected = answer if _keeps_its_answer(call) else f"Awaitable[{answer}]"
        if twin.returns is None or ast.unparse(twin.returns) != expected:
            drift.append(f"{name}: answers other than {expected}")
    return sorted(drift)


@pytest.mark.parametrize(
    ("blocking", "awaited"), [("_SessionCalls", "_AsyncSessionCalls"), ("_HandleCalls", "_AsyncHandleCalls")]
)
def test_the_awaited_shape_is_the_blocking_shape_awaited(blocking: str, awaited: str) -> None:
    assert _drift(_CLASSES[blocking], _CLASSES[awaited]) == []


def test_a_parameter_or_an_answer_changed_on_one_shape_is_drift() -> None:
    (drifted,) = ast.parse(ast.unparse(_CLASSES["_AsyncHandleCalls"])).body
    assert isinstance(drifted, ast.ClassDef)
    calls = _calls(drifted)
    calls["pause"].args.args[1].arg = "why"
    calls["complete"].returns = ast.parse("bool", mode="eval").body
    assert _drift(_CLASSES["_HandleCalls"], drifted) == [
        "complete: answers other than Awaitable[bool]",
        "pause: other parameters",
    ]
