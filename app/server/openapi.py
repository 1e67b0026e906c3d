"""The OpenAPI schema the engine process serves (/api/openapi): it states what the server enforces, so that a request
the schema allows is one the server takes, and an answer is what the schema says (Schemathesis checks both,
tests/app/test_openapi_fuzz.py). Litestar writes most of it; this completes what it leaves out."""

from dataclasses import dataclass

import msgspec
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin  # Litestar's own, not exported
from litestar.openapi.spec import OpenAPIMediaType, Operation, Reference, Schema
from litestar.openapi.spec.enums import OpenAPIType

REF_TEMPLATE = "#/components/schemas/{name}"


class StructSchemas(StructSchemaPlugin):
    """A msgspec Struct's schema as msgspec itself writes it (msgspec.json.schema_components), so that the schema
    states what msgspec checks as it decodes a body: the limits on the fields (their Meta, extra_json_schema
    included), `additionalProperties: false` where unknown fields are refused, and `anyOf` for a union (Litestar's
    `oneOf` refuses a value that fits two of its types, as 1 fits int and float). Litestar's own schema (the
    superclass's) still registers the components that the properties refer to."""

    def to_openapi_schema(self, field_definition, schema_creator) -> Schema:
        schema = super().to_openapi_schema(field_definition, schema_creator)
        (ref,), components = msgspec.json.schema_components([field_definition.type_], ref_template=REF_TEMPLATE)
        own = components[ref["$ref"].removeprefix(REF_TEMPLATE.format(name=""))]
        schema.properties, schema.required = own["properties"], own["required"]
        schema.additional_properties = own.get("additionalProperties")
        return schema


# one server-sent event, as Schemathesis reads each event of a text/event-stream answer: its data is a JSON text
# (a /v1 stream ends with `data: [DONE]`)
SERVER_SENT_EVENT = Schema(type=OpenAPIType.OBJECT, required=["data"], properties={
    "event": Schema(type=OpenAPIType.STRING), "data": Schema(type=OpenAPIType.STRING)})


@dataclass
class EventStream(Operation):
    """An operation that answers a stream of server-sent events (a conversation's replies)."""

    def __post_init__(self) -> None:
        self.responses["200"].content = {"text/event-stream": OpenAPIMediaType(schema=SERVER_SENT_EVENT)}


@dataclass
class JSONOrEventStream(Operation):
    """An operation that answers JSON, or with `"stream": true` a stream of server-sent events (/v1)."""

    def __post_init__(self) -> None:
        self.responses["200"].content["text/event-stream"] = OpenAPIMediaType(schema=SERVER_SENT_EVENT)


@dataclass
class MarkdownOrJSON(Operation):
    """The export: a branch as Markdown, or (format=json) the whole tree as JSON."""

    def __post_init__(self) -> None:
        self.responses["200"].content = {
            "text/markdown": OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING)),
            "application/json": OpenAPIMediaType(schema=Reference(ref="#/components/schemas/ConversationTree"))}
