"""openapi.StructSchemas in process: msgspec writes a Struct's properties, Litestar names the components, and every
reference resolves, where two modules name a type alike (Litestar prefixes them: one_Tool, two_Tool) and for the
other types msgspec makes components of (an enum, a dataclass)."""

import dataclasses
import enum
import json
import re

import msgspec
from litestar import Litestar, post
from litestar.params import JSONBody

from localchat.app.server.openapi import StructSchemas


def named_in(module: str, cls: type) -> type:
    cls.__module__ = module
    return cls


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int


class Tool(msgspec.Struct):  # the first module's
    name: str


OneTool = named_in("app.one", Tool)


class Tool(msgspec.Struct):  # noqa: F811  (the second module's, of the same name)
    color: Color
    at: Point


TwoTool = named_in("app.two", Tool)


class OneRequest(msgspec.Struct):
    tools: list[OneTool]


class TwoRequest(msgspec.Struct):
    tool: TwoTool | None = None
    colors: list[Color] = []


def test_every_reference_resolves_where_two_modules_name_a_type_alike():
    @post("/one")
    async def one(data: JSONBody[OneRequest]) -> None:
        pass

    @post("/two")
    async def two(data: JSONBody[TwoRequest]) -> None:
        pass

    schema = json.loads(json.dumps(Litestar([one, two], plugins=[StructSchemas()]).openapi_schema.to_schema()))
    components = schema["components"]["schemas"]
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(schema)))
    assert {"one_Tool", "two_Tool", "Color", "Point"} <= refs
    assert refs <= set(components)
    assert components["OneRequest"]["properties"]["tools"]["items"] == {"$ref": "#/components/schemas/one_Tool"}
