"""Views that enqueue from a request and read a task's result."""

import json

from django.http import HttpRequest, JsonResponse
from django.tasks import default_task_backend

from .tasks import send_receipt


def place_order(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    result = send_receipt.enqueue(body["order"], email=body["email"])
    return JsonResponse({"task": result.id, "status": result.status}, status=202)


def task_status(request: HttpRequest, result_id: str) -> JsonResponse:
    result = default_task_backend.get_result(result_id)
    payload = {"status": result.status}
    if result.is_finished and not result.errors:
        payload["return_value"] = result.return_value
    return JsonResponse(payload)
