"""Each MCP tool's outputSchema is its answer model's schema: the schema and the payload come from the same models.

shapes.py builds every answer as an instance of the model (so the payload fits it); here the schema tools/list
shows is checked to be that model's, for every tool.  Every answer the integration tests see is validated against
its tool's outputSchema as well (tests/integration/mcp_helpers.py, check_answer).
"""

from __future__ import annotations

import asyncio
import inspect
import typing as t

from cancelkernel.mcp import models, notebooks, tools
from cancelkernel.mcp.options import ServerOptions
from cancelkernel.mcp.server import build


def test_every_output_schema_is_its_answer_models_schema() -> None:
    server, _ = build(ServerOptions())
    listed = asyncio.run(server.list_tools())
    functions = {**tools.TOOLS, **notebooks.TOOLS}
    assert {tool.name for tool in listed} == set(functions)
    for tool in listed:
        answer = inspect.signature(functions[tool.name], eval_str=True).return_annotation
        model = t.get_args(answer)[1]
        assert model.__module__ == models.__name__, (tool.name, model)
        assert tool.output_schema == model.model_json_schema(), tool.name
