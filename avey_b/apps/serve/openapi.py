"""The server's OpenAPI schema (``GET /openapi.json``): FastAPI's, with what FastAPI cannot see added to every route
— its request body (the routes read their bodies themselves, off the event loop: the dependency
:func:`avey_b.apps.serve.service.reading` names the body's model in ``body_type``) and its error answers (the body of
:class:`avey_b.apps.serve.answers.ErrorBody`, for the statuses of :data:`avey_b.apps.serve.answers.ERRORS`; no 401
on the routes open without the key). A route added to any router gets both without more code."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from avey_b.apps.serve.answers import ERRORS, ErrorBody
from avey_b.apps.serve.observe import OPEN_PATHS

REF = "#/components/schemas/{model}"


def body_type(route: APIRoute, service):
    """The model a route reads its body as (None: no body): the ``body_type`` of one of its dependencies, a model or
    a function of the app's :class:`avey_b.apps.serve.service.Service` (a body that depends on the checkpoint)."""
    pending = list(route.dependant.dependencies)
    while pending:
        dependency = pending.pop()
        found = getattr(dependency.call, "body_type", None)
        if found is not None:
            return found if isinstance(found, type) else found(service)
        pending += dependency.dependencies
    return None


def add_schema(schema: dict, model) -> dict:
    """``model``'s JSON schema (validation mode: the names a request may use), its definitions put in the
    components; the reference to it (or its inline schema, for a union)."""
    own = TypeAdapter(model).json_schema(ref_template=REF, mode="validation")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in own.pop("$defs", {}).items():
        components.setdefault(name, definition)
    if isinstance(model, type) and "title" in own:
        components.setdefault(model.__name__, own)
        return {"$ref": REF.format(model=model.__name__)}
    return own


def api_routes(routes):
    """The API routes of ``routes``, those of the routers included in it too (included without a prefix)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):  # FastAPI's record of an included router
            yield from api_routes(route.original_router.routes)


def openapi_schema(app: FastAPI) -> dict:
    """The app's OpenAPI schema (built once, then cached in ``app.openapi_schema``)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    error = add_schema(schema, ErrorBody)
    service = app.state.service
    for route in api_routes(app.routes):
        path = route.path_format
        for method in route.methods:
            operation = schema["paths"][path][method.lower()]
            model = body_type(route, service)
            if model is not None:
                operation["requestBody"] = {"required": True,
                                            "content": {"application/json": {"schema": add_schema(schema, model)}}}
            responses = operation.setdefault("responses", {})
            for status, description in ERRORS.items():
                if status == 401 and path in OPEN_PATHS:
                    continue
                if status in (400, 408, 413) and model is None and "{" not in path:
                    continue  # no body, no parameter: nothing to refuse but the key, the method, the queue
                responses[str(status)] = {"description": description, "content": {"application/json": {
                    "schema": error}}}
    app.openapi_schema = schema
    return schema
