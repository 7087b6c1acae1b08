"""Tasks of the test app: sync and async, with context, priority, queue names and failures."""

from typing import Any

from django.tasks import TaskContext, task


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
async def send_receipt(order_id: int, *, email: str) -> dict[str, Any]:
    return {"order": order_id, "to": email}


@task(takes_context=True)
def who_am_i(context: TaskContext, label: str) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "label": label}


@task()
def fail(message: str) -> None:
    raise ValueError(message)


@task()
def returns_a_set() -> Any:
    return {1, 2}


def record(name: str) -> str:
    return name


@task(priority=-50)
def low(name: str) -> str:
    return record(name)


@task(priority=50)
def high(name: str) -> str:
    return record(name)


_failed_once: set[str] = set()


@task()
def flaky(key: str) -> str:
    """Fails the first time it runs for ``key`` (in this process), then succeeds."""
    if key not in _failed_once:
        _failed_once.add(key)
        raise ConnectionError(f"first try for {key}")
    return key
