"""The server's own routes: ``GET /health`` (the model, what it serves, its limits; open without the API key:
:data:`avey_b.apps.serve.observe.OPEN_PATHS`) and ``GET /metrics`` (Prometheus)."""

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from avey_b.apps.serve.answers import Health, ok
from avey_b.apps.serve.service import ServiceDep

router = APIRouter()


@router.get("/health", responses=ok(Health))
def health(service: ServiceDep):
    encoder = service.encoder
    return {"status": "ok", "model": service.name, "architecture": encoder.architecture,
            "serves": encoder.kinds, **service.limits(), "device": str(encoder.device), "bf16": encoder.bf16,
            "threads": service.threads(), "onnx": encoder.onnx_file.name if encoder.onnx_file else None}


@router.get("/metrics", response_class=PlainTextResponse)
def prometheus(request: Request):
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
