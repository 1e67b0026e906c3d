"""The OpenAPI schema the engine process serves (/api/openapi): it states what the server enforces, so that a request
the schema allows is one the server takes, and an answer is what the schema says (Schemathesis checks both,
tests/app/test_openapi_fuzz.py). Litestar writes most of it; this completes what it leaves out."""

from dataclasses import dataclass

import msgspec
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin  # Litestar's own, not exported
from litestar.openapi.spec import OpenAPIMediaType, Operation, Reference, Schema
from litestar.openapi.spec.enums import OpenAPIType
from litestar.typing import FieldDefinition

from localchat.app.protocol.conversations import SamplingSettings, SendMessage
from localchat.app.protocol.limits import NOT_BLANK
from localchat.app.protocol.openai import ChatCompletionRequest, CompletionRequest

REF_TEMPLATE = "#/components/schemas/{name}"


class StructSchemas(StructSchemaPlugin):
    """A msgspec Struct's schema as msgspec itself writes it (msgspec.json.schema_components), so that the schema
    states what msgspec checks as it decodes a body: the limits on the fields (their Meta, extra_json_schema
    included), `additionalProperties: false` where unknown fields are refused, and `anyOf` for a union (Litestar's
    `oneOf` refuses a value that fits two of its types, as 1 fits int and float). Litestar's own schema (the
    superclass's) still registers the components that the properties refer to."""

    def to_openapi_schema(self, field_definition, schema_creator) -> Schema:
        schema = super().to_openapi_schema(field_definition, schema_creator)
        nested = _nested_components(field_definition.type_)
        refs, components = msgspec.json.schema_components([field_definition.type_, *nested],
                                                          ref_template=REF_TEMPLATE)
        # msgspec names a component by its class (Tool); Litestar by as much of its module as tells two of one name
        # apart (openai_Tool, ollama_Tool): every reference msgspec writes becomes Litestar's, which resolves
        litestar_refs = {ref["$ref"]: schema_creator.for_field_definition(FieldDefinition.from_annotation(struct))
                         for ref, struct in zip(refs[1:], nested)}
        own = _with_refs(components[refs[0]["$ref"].removeprefix(REF_TEMPLATE.format(name=""))], litestar_refs)
        schema.properties, schema.required = own["properties"], own["required"]
        schema.additional_properties = own.get("additionalProperties")
        schema.all_of = BODY_RULES.get(field_definition.type_)
        return schema


# the types msgspec writes as components of their own, referred to by name
_NAMED = (msgspec.inspect.StructType, msgspec.inspect.DataclassType, msgspec.inspect.TypedDictType,
          msgspec.inspect.NamedTupleType, msgspec.inspect.EnumType)


def _nested_components(struct: type) -> list[type]:
    """The types of msgspec's components that a Struct's fields hold, however deep (the Struct itself left out)."""
    found: list[type] = []

    def visit(info: msgspec.inspect.Type) -> None:
        if isinstance(info, _NAMED):
            if info.cls in found or info.cls is struct:
                return
            found.append(info.cls)
            for f in getattr(info, "fields", ()):
                visit(f.type)
        for inner in _inner_types(info):
            visit(inner)

    for f in msgspec.inspect.type_info(struct).fields:
        visit(f.type)
    return found


def _inner_types(info: msgspec.inspect.Type) -> list[msgspec.inspect.Type]:
    if isinstance(info, msgspec.inspect.Metadata | msgspec.inspect.CollectionType):
        return [info.type if isinstance(info, msgspec.inspect.Metadata) else info.item_type]
    if isinstance(info, msgspec.inspect.DictType):
        return [info.key_type, info.value_type]
    if isinstance(info, msgspec.inspect.UnionType):
        return list(info.types)
    if isinstance(info, msgspec.inspect.TupleType):
        return list(info.item_types)
    return []


def _with_refs(value, refs: dict[str, Reference]):
    """msgspec's schema with each `{"$ref": ...}` replaced by the Reference in refs. A tagged union's discriminator
    is left out: its mapping names components in msgspec's words, and each member states its tag as a const."""
    if isinstance(value, dict):
        if "$ref" in value:
            return refs[value["$ref"]]
        tagged = isinstance(value.get("discriminator"), dict) and "propertyName" in value["discriminator"]
        return {key: _with_refs(item, refs) for key, item in value.items() if not (tagged and key == "discriminator")}
    if isinstance(value, list):
        return [_with_refs(item, refs) for item in value]
    return value


# What the handlers check between the fields of a body, beyond each field's own type: rules the body must also match
# (allOf), so that a body the schema allows is one the handler takes
BODY_RULES = {
    ChatCompletionRequest: [{"description": "top_logprobs needs logprobs: true", "anyOf": [
        {"properties": {"top_logprobs": {"type": "null"}}},
        {"properties": {"logprobs": {"const": True}}, "required": ["logprobs"]}]},
        {"description": "a required or named tool_choice needs tools (a named one, one of them by that name) and "
                        "excludes a JSON response_format: both would shape the reply", "anyOf": [
            {"properties": {"tool_choice": {"enum": [None, "auto", "none"]}}},
            {"properties": {"tools": {"minItems": 1}, "response_format": {"anyOf": [
                {"type": "null"}, {"properties": {"type": {"const": "text"}}}]}}, "required": ["tools"]}]}],
    CompletionRequest: [{"description": "echo excludes logprobs (prompt logprobs are not computed)", "anyOf": [
        {"properties": {"echo": {"const": False}}},
        {"properties": {"logprobs": {"type": "null"}}}]}],
    SamplingSettings: [{"description": 'tool_choice "required" needs tools and excludes json_mode: both would shape '
                                       "the reply", "anyOf": [
        {"properties": {"tool_choice": {"enum": ["auto", "none"]}}},
        {"properties": {"tools": {"minItems": 1}, "json_mode": {"const": False}}, "required": ["tools"]}]}],
    SendMessage: [{"description": "a message has text, unless it is a tool's result or carries documents", "anyOf": [
        {"properties": {"content": {"pattern": NOT_BLANK}}},
        {"properties": {"tool_call_id": {"type": "string"}}, "required": ["tool_call_id"]},
        {"properties": {"documents": {"minItems": 1}}, "required": ["documents"]}]}],
}


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
class JSONOrNDJSON(Operation):
    """Ollama's chat and generate: JSON with `"stream": false`, else (its default) NDJSON, one object a line as the
    JSON answer is, the last with done true; a failure midway ends the stream with a line of Ollama's Error."""

    def __post_init__(self) -> None:
        whole = self.responses["200"].content["application/json"].schema
        line = Schema(any_of=[whole, Reference(ref="#/components/schemas/Error")])
        self.responses["200"].content["application/x-ndjson"] = OpenAPIMediaType(schema=line)


@dataclass
class MarkdownOrJSON(Operation):
    """The export: a branch as Markdown, or (format=json) the whole tree as JSON."""

    def __post_init__(self) -> None:
        self.responses["200"].content = {
            "text/markdown": OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING)),
            "application/json": OpenAPIMediaType(schema=Reference(ref="#/components/schemas/ConversationTree"))}
